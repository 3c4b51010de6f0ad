"""Lightweight agents that run no processes: the control plane at 1,000+ nodes on one machine.

``python -m testbed.lightweight host ...`` hosts many agents in one OS process: the real ``Agent``
(HTTP server, heartbeats, coordinator) with a process-spawner that runs nothing.
"""

from __future__ import annotations

import argparse
import json
import os
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


def lightweight_address(node_id: int) -> str:
    """A distinct loopback address for each of up to 65,000 lightweight nodes."""
    return f"127.1.{node_id // 250}.{node_id % 250 + 1}"


def host(args: argparse.Namespace) -> None:
    """Run ``count`` lightweight agents, node ids ``first`` + k * ``stride``, in this process until killed."""
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
