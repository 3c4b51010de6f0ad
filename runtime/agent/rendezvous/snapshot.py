"""The coordinator's membership view served at ``GET /members``: pure, from ``coordinator.Coordinator``'s
state. Standard library only."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

from runtime.agent.spec.job import JobSpec
from runtime.agent.spec.status import RUNNING
from runtime.agent.world import Node, World, nodes_from

FENCED = "fenced"
"""The view's status once its coordinator was fenced out (``lease``): its world is not the job's."""


def members_view(spec: JobSpec, world: Optional[World], members: Mapping[int, Node], dead: Mapping[int, float],
                 states: Mapping[int, str], age: Callable[[int], float], epoch: int,
                 fenced: bool = False) -> dict[str, Any]:
    """Node rank, address, state and seconds since last heard of every known node, and the job's
    generation, epoch and status (:data:`FENCED` when ``fenced``).

    Args:
        spec: the job spec (name, workers, quorum).
        world: the coordinator's world, or ``None`` while it forms.
        members: every known node, by node id.
        dead: node ids declared dead (to the monotonic time they were).
        states: node id to its processes' state in the world.
        age: seconds since a node was last heard.
        epoch: the coordinator's epoch.
        fenced: whether the coordinator was fenced out.
    """
    in_world = {n.node_id: i for i, n in enumerate(world.nodes)} if world else {}
    rows = []
    for n in nodes_from(members.values()):
        if n.node_id in dead:
            state = "dead"
        else:
            state = states.get(n.node_id, RUNNING) if n.node_id in in_world else "registered"
        rows.append({
            "node_id": n.node_id, "node_rank": in_world.get(n.node_id), "addr": n.addr, "port": n.port,
            "num_proc": n.num_proc, "state": state,
            "last_seen_s": round(age(n.node_id), 3) if n.node_id in in_world else None,
        })
    return {
        "job": spec.job_name,
        "workers": spec.workers,
        "quorum": spec.quorum,
        "registered": sorted(members),
        "generation": world.generation if world else 0,
        "epoch": epoch,
        "status": FENCED if fenced else world.status if world else "forming",
        "members": rows,
    }
