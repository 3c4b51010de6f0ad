"""A Ray driver starts only once every node's daemon has joined the cluster. Standard library only
(Ray itself runs in a child process, with the driver's interpreter, which has Ray).

``ray start`` on a worker node returns to nobody: the head's port answering says nothing about the
workers, and a driver that sizes an actor pool from ``ray.cluster_resources()`` right after
``ray.init()`` would see part of the cluster. So before the driver's code runs, its bootstrap runs
:data:`CHECK` (``ray.init`` to the head, then ``ray.nodes()`` until every node is alive) in a child
process, so no Ray state is left in the driver's own process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from typing import Sequence

CHECK = """
import json, sys, time
address, expected, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
deadline = time.monotonic() + timeout
import ray
ray.init(address=address, logging_level="ERROR", log_to_driver=False, configure_logging=False)
alive = []
while True:
    alive = sorted(n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive"))
    if len(alive) >= expected or time.monotonic() >= deadline:
        break
    time.sleep(0.2)
ray.shutdown()
print(json.dumps(alive), flush=True)
"""
"""Run as ``python -c CHECK ADDRESS NODES TIMEOUT``: prints the alive nodes' addresses as a JSON list."""
MARGIN = 60.0
"""Seconds the check may take beyond its own timeout (Ray's import and connection) before it is killed."""


@dataclass(frozen=True)
class HeadReport:
    """What the Ray head reported.

    Attributes:
        alive: addresses of the nodes whose daemon is alive, sorted.
        missing: the expected node addresses (node-rank order) that are not among them.
    """

    alive: tuple[str, ...]
    missing: tuple[str, ...]


def missing_nodes(expected: Sequence[str], alive: Sequence[str]) -> tuple[str, ...]:
    """The addresses in ``expected`` (one per node, node-rank order; several nodes may share one)
    not accounted for by ``alive`` (one entry per alive Ray node)."""
    left = list(alive)
    missing = []
    for addr in expected:
        if addr in left:
            left.remove(addr)
        else:
            missing.append(addr)
    return tuple(missing)


def wait(address: str, expected: Sequence[str], timeout: float, python: str = sys.executable) -> HeadReport:
    """Wait until the Ray cluster at ``address`` has one alive node per ``expected`` address.

    Args:
        address: the head's GCS, ``host:port``.
        expected: every node's address, node-rank order.
        timeout: seconds to wait for them.
        python: the interpreter with Ray (the driver's).

    Raises:
        RuntimeError: the check could not run (no Ray, or the head did not answer); the message
            carries its last stderr line.
    """
    try:
        done = subprocess.run([python, "-c", CHECK, address, str(len(expected)), str(timeout)],
                              capture_output=True, text=True, timeout=timeout + MARGIN, check=False)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"asking the Ray head at {address} for its nodes took over {timeout + MARGIN:g} s") from None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"could not ask the Ray head at {address} for its nodes: {last}")
    alive = tuple(json.loads(lines[-1]))
    return HeadReport(alive, missing_nodes(expected, alive))
