"""Membership: time from a fault to every surviving process being told, and coordinator heartbeat load.

Detection, with real agents and real user processes (bench/recorder.py), 3 nodes, elastic:
  crash  a user process exits non-zero (its time is written by the process itself),
  kill   a node's agent and its processes get SIGKILL (a silent node loss),
  stop   a node's agent gets SIGSTOP (a hang, not a crash).
The time runs from the fault to the last survivor's record of the WorkerMembershipChanged.

Load, with lightweight agents (the real Agent with a spawner that runs no processes, up to
``AGENTS_PER_HOST`` per OS process, nodes interleaved over the processes): requests per second that
the coordinator receives at 16, 128, 512, 768 and 1,024 nodes, over a window after membership has
settled, per node. A size the machine cannot keep settled prints ``not measured`` and ``nan``.

References: torchrun declares a node dead 15 s after its last keep-alive; Probing after 25 s
(removed after 50 s). Targets (issue 26): crash <= 1,000 ms, kill <= 250 ms, stop <= 2,000 ms to
every survivor; load <= 0.1 requests/s per node at 1,024 nodes. ``--quick``: one trial per fault
and 3 s windows (``--quick --nodes 16`` is what tests/test_bench_quick.py runs). Last line:
``membership crash_ms=... kill_ms=... stop_ms=... load_rps_per_node_<N>=...`` (medians of the trials).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as `python bench/membership.py`
from runtime.agent import contract
from runtime.agent.errors import TransportError
from runtime.agent.net.transport import request_json
from runtime.agent.rendezvous.heartbeat import HeartbeatTiming
from runtime.agent.rendezvous.tree import layout
from runtime.agent.spec.job import default
from runtime.agent.spec.status import RUNNING
from testbed.agents import ROOT, AgentCluster, project_env
from testbed.lightweight import lightweight_address

TARGETS_MS = {"crash": 1000, "kill": 250, "stop": 2000}
"""Fault to every survivor told, milliseconds (issue 26)."""
TORCHRUN_DEAD_S = 15.0
PROBING_DEAD_S = 25.0
RECORDER = ROOT / "bench" / "recorder.py"
TTL = 3.0
AGENTS_PER_HOST = 128
"""Lightweight agents per OS process. Each is a real agent with its own threads; past about this many
in one interpreter, GIL hand-offs among their threads, not the work, set the latency of a heartbeat."""
FLEET_NICENESS = 10
"""The niceness of the processes running nodes 1 and up in a load trial: node 0's process, which on a cluster has a
machine to itself, is not starved of these 2 cores by the 1,023 nodes simulated beside it (it was: at 1,024 nodes its
``GET /info`` timed out after 5 s once the fleet had settled)."""
CONTROL_TIMEOUT = 30.0
"""Seconds the benchmark waits for its own reads of the coordinator (``/members``, ``/info``)."""


def loadavg() -> str:
    """The machine's load averages (1, 5, 15 minutes), as ``/proc/loadavg`` gives them."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def wait_for(condition: Callable[[], bool], timeout: float, interval: float = 0.01) -> bool:
    """Poll ``condition`` every ``interval`` seconds until true or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return False


SURVIVORS = (0, 1)
"""The nodes that stay in every trial (node 2 is the one that fails)."""


def told_times(out: Path, generation: int) -> list[float]:
    """For each survivor told so far, the wall time its process first recorded a change to
    ``generation`` or later."""
    first: dict[int, float] = {}
    for node in SURVIVORS:
        for p in out.glob(f"node-{node}-pid-*.json"):
            try:
                events = json.loads(p.read_text() or "[]")
            except ValueError:
                continue
            times = [e["t"] for e in events if e["generation"] >= generation]
            if times:
                first[node] = min(first.get(node, times[0]), *times)
    return list(first.values())


def detection_trial(kind: str, tmp: Path) -> float:
    """One fault of ``kind`` in a fresh 3-node elastic job; milliseconds until both survivors knew."""
    out = tmp / "events"
    out.mkdir()
    stop = tmp / "stop"
    # The crash spends node 2's failure budget: max_restarts 1 lets the elastic job go on without it (issue 26).
    extra = {"CRASH_RANK": "2", "CRASH_AFTER": "1.5", "TRAINPLANE_MAX_RESTARTS": "1"} if kind == "crash" else {}
    job = AgentCluster(tmp, [str(RECORDER), str(out), str(stop)], workers=3, TRAINPLANE_MIN_WORKERS="2", **extra)
    try:
        if not wait_for(lambda: len(list(out.glob("node-*.json"))) == 3, 60):
            raise RuntimeError(f"{kind}: processes did not start")
        if kind == "crash":
            if not wait_for((out / "crash-time").exists, 30):
                raise RuntimeError("crash: no crash recorded")
            fault_at = float((out / "crash-time").read_text())
        elif kind == "kill":
            fault_at = time.time()
            job.kill(2)
        else:
            fault_at = time.time()
            job.agents[2].send_signal(signal.SIGSTOP)
        if not wait_for(lambda: len(told_times(out, 2)) == len(SURVIVORS), 30):
            raise RuntimeError(f"{kind}: survivors were not told within 30 s")
        return (max(told_times(out, 2)) - fault_at) * 1000
    finally:
        if job.agents[2].poll() is None:
            job.agents[2].send_signal(signal.SIGCONT)
        stop.touch()
        job.close()


def load_trial(nodes: int, window: float, hosts: int, settle: float) -> float:
    """Heartbeat requests per second per node received by the coordinator of ``nodes`` lightweight agents."""
    token = secrets.token_urlsafe(16)
    settings = {
        "job_name": "load", "token": token, "workers": nodes, "num_proc": 1, "entrypoint": ["none.py"],
        "agent_port": 32300, "coordinator_port": 32300, "quorum_timeout": 120.0, "distribution": "pytorch",
        "min_workers": 1,
    }
    procs = []
    # Node 0 alone; the others interleaved (host k runs nodes 1+k, 1+k+hosts, ...), so the tree's
    # parents, which do most of the work, are spread over the hosts as over separate machines.
    hosts = min(hosts, nodes - 1)
    plan = [(0, 1, 1)] + [(1 + k, len(range(1 + k, nodes, hosts)), hosts) for k in range(hosts)]
    with tempfile.TemporaryDirectory() as tmp:
        env = project_env(TMPDIR=tmp)
        try:
            for first, count, stride in plan:
                niceness = 0 if first == 0 else FLEET_NICENESS
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "testbed.lightweight", "host", "--first", str(first), "--count", str(count),
                     "--stride", str(stride), "--settings", json.dumps(settings)],
                    cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                    preexec_fn=lambda n=niceness: os.nice(n),  # noqa: PLW1509 (nice only)
                ))
            coordinator = lightweight_address(0)

            def read(path: str) -> dict[str, Any]:
                return request_json(coordinator, 32300, "GET", path, token, timeout=CONTROL_TIMEOUT, job="load")

            def settled() -> bool:
                """World formed, and every member heard from (directly or aggregated) within a TTL."""
                try:
                    snap = read("/members")
                except TransportError:
                    return False
                seen = [m["last_seen_s"] for m in snap["members"]]
                return snap["status"] == RUNNING and len(seen) == nodes and max(seen) < 3.0

            if not wait_for(settled, settle, interval=1.0):  # a 1,024-member snapshot is ~100 KB: not every 10 ms
                raise RuntimeError(f"{nodes} lightweight nodes did not settle into one world within {settle:g} s")
            time.sleep(3.0)  # let the heartbeat intervals back off to their cap
            before = read("/info")["requests_served"]
            time.sleep(window)
            after = read("/info")["requests_served"]
            snapshot = read("/members")
            if snapshot["generation"] != 1:
                print(f"  warning: {nodes} nodes: generation moved to {snapshot['generation']} "
                      f"(the machine could not keep every heartbeat within the TTL)", flush=True)
        finally:
            for p in procs:
                p.kill()
                p.wait()
    return (after - before - 1) / window / nodes


def main() -> None:
    """Run the trials and print the summary lines."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer trials and shorter windows (under 60 s)")
    p.add_argument("--nodes", type=int, nargs="+", default=[16, 128, 512, 768, 1024], help="load trial sizes")
    p.add_argument("--skip-detection", action="store_true", help="only the load trials")
    args = p.parse_args()
    trials = 1 if args.quick else 3
    window = 3.0 if args.quick else 6.0
    print(f"reference: torchrun declares a node dead after {TORCHRUN_DEAD_S * 1000:.0f} ms; "
          f"Probing after {PROBING_DEAD_S * 1000:.0f} ms; load average {loadavg()}", flush=True)
    medians = {}
    for kind in () if args.skip_detection else ("crash", "kill", "stop"):
        times = []
        for _ in range(trials):
            with tempfile.TemporaryDirectory() as tmp:
                times.append(detection_trial(kind, Path(tmp)))
        medians[kind] = statistics.median(times)
        print(f"{kind:>5}: told all survivors in " + ", ".join(f"{t:.0f}" for t in times) + " ms "
              f"(target {TARGETS_MS[kind]:,} ms: {'met' if medians[kind] <= TARGETS_MS[kind] else 'MISSED'}; "
              f"load average {loadavg()})", flush=True)
    loads = {}
    for nodes in args.nodes:
        try:
            loads[nodes] = load_trial(nodes, window, hosts=-(-(nodes - 1) // AGENTS_PER_HOST),
                                      settle=60 if args.quick else 180)
        except (RuntimeError, TransportError) as exc:
            loads[nodes] = float("nan")
            print(f"load: {nodes} nodes -> not measured: {exc}", flush=True)
            continue
        print(f"load: {nodes} nodes -> {loads[nodes]:.3f} requests/s per node at the coordinator "
              f"({loads[nodes] * nodes:.1f} requests/s)", flush=True)
    hops = layout(1024, width=contract.DEFAULT_TREE_FANOUT, threshold=contract.DEFAULT_TREE_THRESHOLD).hops
    cap = HeartbeatTiming(interval=default("heartbeat_interval"), ttl=TTL, hops=hops).cap
    width = contract.DEFAULT_TREE_FANOUT
    print(f"model (not a measurement): at 1,024 nodes the coordinator hears only its <= {width} tree children, "
          f"each at most every TTL/(hops+2) = {cap:g} s: <= {width / cap / 1024:.3f} requests/s per node", flush=True)
    fields = " ".join(f"{k}_ms={v:.0f}" for k, v in medians.items())
    print(f"membership {fields} " + " ".join(f"load_rps_per_node_{n}={v:.3f}" for n, v in loads.items()))


if __name__ == "__main__":
    main()
