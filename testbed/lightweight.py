"""Lightweight agents that run no processes: the control plane at 1,000+ nodes on one machine.

``python -m testbed.lightweight host ...`` hosts many agents in one OS process: the real ``Agent``
(HTTP server, heartbeats, coordinator) with a process-spawner that runs nothing.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import threading
from typing import Optional

from runtime.agent.agent import Agent
from testbed.settings import agent_settings


class NullProcesses:
    """A process supervisor that runs nothing: the lightweight agents' spawner seam."""

    def __init__(self, *, generation: int, **_kwargs: object) -> None:
        self.generation = generation

    def start(self) -> None:
        """Nothing to start."""

    def stop(self, grace: float, sig: int = 15) -> None:
        """Nothing to stop."""

    def send(self, local_rank: int, sig: int) -> bool:
        """Pretend every process is alive."""
        return True

    def activity(self) -> list[tuple[int, Optional[int], float]]:
        """No ranks."""
        return []

    def renumber(self, first_rank: int) -> None:
        """No process, nothing to renumber."""


HOST_SWITCH_INTERVAL = 0.05
"""Seconds of CPython's GIL switch interval in a process hosting many agents (the default is 0.005).

A production agent has an interpreter to itself; here 128 agents (about 385 threads) share one GIL, and every
thread waiting for it wakes each switch interval to ask for it. With 1,024 agents on 2 cores that waiting took most
of the fleet's CPU as system time (1.5-2.0 CPU seconds a second against 0.5-1.0 of Python; 0.6-0.9 with this value)
and node 0 lost its lease to the stall in 4 of 5 runs of ``bench/membership.py --nodes 1024``. The agents' own work
blocks on sockets, which gives the GIL up at once, so the longer interval only shortens the waiting between them."""


HOST_GC_THRESHOLDS = (700, 10, 1_000_000_000)
"""CPython's collection thresholds in a process hosting many agents: the young generations as by default, no full
collection (the third threshold is never reached in a benchmark's life).

A full collection walks every object of the interpreter, and runs once the objects kept since the last one exceed a
quarter of those it kept. A production agent's first world of 1,024 nodes (1,000-3,000 objects) is under a quarter of
what its imports keep (about 17,500), so forming it walks nothing: node 0's host ran no full collection in the first
10 s of a 1,024-node trial. A host of 128 agents gains 128 such worlds at once against one set of imports: each fleet
host ran 3 or 4 full collections in those 10 s, each a 50-75 ms pause of all its agents (0.18-0.29 CPU seconds a
host, against 0.1 for its young collections; ``gc.callbacks``), when the coordinator's lease needs a majority's
beats. Node 0 was fenced out in 4 of 7 runs of ``bench/membership.py --skip-detection --nodes 1024`` with the default
thresholds, in 0 of 6 with these (the same day)."""


def tune_host_interpreter(agents: int) -> None:
    """Set this interpreter up to host ``agents`` agents: with more than one, :data:`HOST_SWITCH_INTERVAL` and
    :data:`HOST_GC_THRESHOLDS`; a host of one is a production agent's interpreter and keeps CPython's defaults."""
    if agents > 1:
        sys.setswitchinterval(HOST_SWITCH_INTERVAL)
        gc.set_threshold(*HOST_GC_THRESHOLDS)


def lightweight_address(node_id: int) -> str:
    """A distinct loopback address for each of up to 65,000 lightweight nodes."""
    return f"127.1.{node_id // 250}.{node_id % 250 + 1}"


def host(args: argparse.Namespace) -> None:
    """Run ``count`` lightweight agents, node ids ``first`` + k * ``stride``, in this process until killed."""
    tune_host_interpreter(args.count)
    settings = json.loads(args.settings)
    agents = []
    for node_id in range(args.first, args.first + args.count * args.stride, args.stride):
        s = agent_settings(
            **settings, node_id=node_id, advertise_address=lightweight_address(node_id),
            bind_address=lightweight_address(node_id), coordinator=lightweight_address(0),
        )
        log = open(os.environ.get("BENCH_AGENT_LOG", os.devnull), "a")  # noqa: SIM115 - the agent's for its life
        agents.append(Agent(s, log=log, spawner=NullProcesses))
    threads = [threading.Thread(target=a.run, daemon=True) for a in agents]
    for t in threads:
        t.start()
    print("ready", flush=True)
    for t in threads:
        t.join()


def main() -> None:
    """``python -m testbed.lightweight host --first F --count C [--stride S] --settings JSON``."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    h = sub.add_parser("host", help="host lightweight agents")
    h.add_argument("--first", type=int, required=True)
    h.add_argument("--count", type=int, required=True)
    h.add_argument("--stride", type=int, default=1,
                   help="host nodes F, F+S, F+2S, ... (interleaving hosts spreads a tree's parents over them)")
    h.add_argument("--settings", required=True,
                   help="agent settings shared by all nodes, by name, as JSON (testbed.settings)")
    args = p.parse_args()
    host(args)


if __name__ == "__main__":
    main()
