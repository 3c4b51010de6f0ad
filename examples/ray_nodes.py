"""A Ray driver under trainplane: one task pinned to each node of the job's Ray cluster.

Run it as a single-controller job; the script runs once, on node 0, with ``RAY_ADDRESS`` pointing at
the Ray head the agents started there, and every node (node 0 included) is a Ray node::

    python -m runtime launch --workers 2 --distribution ray examples/ray_nodes.py

The driver starts once every node of the job has joined the cluster, so it runs one task on each
live node with a hard node-affinity strategy at once, and prints the addresses the tasks ran on
(``127.0.0.2`` and ``127.0.0.3`` locally). ``--out PATH`` also writes them, with the driver's view of
the environment contract, as JSON.
"""

from __future__ import annotations

import argparse
import json
import os

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

CONTRACT = ("RAY_ADDRESS", "WORLD_SIZE", "RANK", "NODE_RANK", "NODE_WORLD_SIZE", "POD_IPS", "MASTER_PORT")
"""The variables the driver reports with ``--out``."""


@ray.remote
def node_address() -> str:
    """The address of the Ray node this task runs on."""
    return ray.util.get_node_ip_address()


def alive_nodes() -> list[str]:
    """Node ids of the cluster's live nodes."""
    return [n["NodeID"] for n in ray.nodes() if n["Alive"]]


def main() -> None:
    """Connect, wait for every node, run one pinned task per node, report where they ran."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None, help="write the addresses and the environment here as JSON")
    ns = parser.parse_args()
    ray.init()  # the address comes from RAY_ADDRESS; every node has joined already
    pinned = [node_address.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
              for node in alive_nodes()]
    addresses = sorted(set(ray.get(pinned)))
    print(f"tasks ran on {len(addresses)} node(s): {', '.join(addresses)}", flush=True)
    if ns.out:
        with open(ns.out, "w") as f:
            json.dump({"addresses": addresses, "env": {k: os.environ.get(k) for k in CONTRACT}}, f)


if __name__ == "__main__":
    main()
