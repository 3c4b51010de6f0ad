"""Whether a generation's processes are worth starting: a pure decision for the agent, which may learn of a newer
world while its node's ranks were slow to stop (``NodeProcesses.stop``'s ``meanwhile``). Standard library only."""

from __future__ import annotations

from collections.abc import Iterable

from runtime.agent.spec.status import RUNNING
from runtime.agent.world import World


def superseded(world: World, arrived: Iterable[World], node_id: int) -> bool:
    """Whether a world that arrived and waits to be handled makes starting ``world``'s processes on node ``node_id``
    pointless: a newer one (``World.order``) that restarts every process (another ``restart_count``) or leaves this
    node out, or the verdict of ``world``'s generation or a later one (the job ended). A newer world of the same
    restart (an elastic change this node stays in) does not: it is delivered to the processes ``world`` starts.

    Args:
        world: the world whose processes are about to start.
        arrived: worlds waiting in the agent's queue, oldest first.
        node_id: this node's id.
    """
    return any((w.status != RUNNING and w.order >= world.order) or (w.order > world.order and (
        w.restart_count != world.restart_count or not w.has(node_id))) for w in arrived)
