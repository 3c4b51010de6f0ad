"""A caller going mid-call against a call timeout: how soon the ranks are free for the next call.

::

    PYTHONPATH=. python bench/cancel.py     # 5 rounds per path, interleaved (about 30 s)
    PYTHONPATH=. python bench/cancel.py --quick     # 1 round per path, the same last line

A 2-node local service job runs ``service_fns.mark_then_wait`` on both ranks (it would wait two minutes
for a gate file nobody creates); once both ranks run it, the call is ended one of three ways, and the
time from that moment to the next call's answer (``whoami``, from a new client) is measured:

* ``timeout``: the call's own deadline passes (the baseline: the cancellation every call already had);
* ``cut``: the caller's connection is cut (a relay between it and the coordinator is closed);
* ``killed``: the driver process is killed (SIGKILL), as Ctrl-C or a crash ends a driver.

The last line is ``cancel timeout_p50_s=... cut_p50_s=... killed_p50_s=... cut_ratio=... killed_ratio=...``
(ratios against ``timeout``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from runtime.agent.errors import CallTimeout, TransportError
from runtime.client import JobClient
from runtime.local.jobs import LocalJob, LocalJobSpec
from runtime.workflow.portforward import Relay
from testbed.agents import ROOT, project_env
from testbed.jobs import serving

FNS = "testbed.service_fns"
TIMEOUT = 3.0
"""The baseline call's deadline, seconds."""
WAIT = 120.0


def running(prefix: Path) -> bool:
    return all(Path(f"{prefix}-{r}").exists() for r in (0, 1))


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: not within {WAIT:g} s")
        time.sleep(0.005)


def next_call(job: LocalJob, since: float) -> float:
    with JobClient(job.url, job.token) as client:
        if [r["rank"] for r in client.call(f"{FNS}:whoami", timeout=WAIT)] != [0, 1]:
            raise SystemExit("the next call did not answer from both ranks")
    return time.monotonic() - since


def by_timeout(job: LocalJob, prefix: Path) -> float:
    started = time.monotonic()
    with JobClient(job.url, job.token) as client, contextlib.suppress(CallTimeout):
        client.call(f"{FNS}:mark_then_wait", str(prefix), str(prefix) + ".gate", timeout=TIMEOUT)
    return next_call(job, started + TIMEOUT)


def by_cut(job: LocalJob, prefix: Path) -> float:
    coordinator = (job.plan.addresses[0], job.plan.ports[0])
    relay = Relay(lambda: socket.create_connection(coordinator, timeout=10))

    def call() -> None:
        with JobClient(relay.url, job.token) as client, contextlib.suppress(TransportError):
            client.call(f"{FNS}:mark_then_wait", str(prefix), str(prefix) + ".gate")

    caller = threading.Thread(target=call)
    caller.start()
    wait_for(lambda: running(prefix), "both ranks running the call")
    cut = time.monotonic()
    relay.close()
    taken = next_call(job, cut)
    caller.join(WAIT)
    return taken


def by_kill(job: LocalJob, prefix: Path) -> float:
    driver = subprocess.Popen([sys.executable, "-m", "testbed.caller_driver", "existing", job.url, job.token,
                               str(prefix), str(prefix) + ".gate"], cwd=ROOT, env=project_env(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: running(prefix), "both ranks running the driver's call")
        killed = time.monotonic()
        os.killpg(driver.pid, signal.SIGKILL)
        return next_call(job, killed)
    finally:
        driver.kill()
        driver.wait()


def main() -> None:
    """Run the rounds and print one line per path and the summary line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds per path (default 5)")
    parser.add_argument("--quick", action="store_true", help="one round per path (a check that it runs)")
    args = parser.parse_args()
    if args.quick:
        args.rounds = 1
    spec = LocalJobSpec(workers=2, num_proc=1, mode="service", master_port=0, grace_period=1.0)
    paths = {"timeout": by_timeout, "cut": by_cut, "killed": by_kill}
    times: dict[str, list[float]] = {name: [] for name in paths}
    load = os.getloadavg()[0]
    with serving(spec, ready_timeout=120) as job, tempfile.TemporaryDirectory() as tmp:
        next_call(job, time.monotonic())
        for i in range(args.rounds):
            for name, path in paths.items():
                times[name].append(path(job, Path(tmp) / f"{name}-{i}"))
    p50 = {name: statistics.median(values) for name, values in times.items()}
    for name, values in times.items():
        print(f"{name}: p50 {p50[name]:.3f} s, max {max(values):.3f} s over {len(values)} rounds")
    print(f"load average {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")
    print(f"cancel timeout_p50_s={p50['timeout']:.3f} cut_p50_s={p50['cut']:.3f} killed_p50_s={p50['killed']:.3f} "
          f"cut_ratio={p50['cut'] / p50['timeout']:.2f} killed_ratio={p50['killed'] / p50['timeout']:.2f}")


if __name__ == "__main__":
    main()
