"""Whether a generation's processes are worth starting: a pure decision for the agent, which may learn of a newer
world while its node's ranks were slow to stop (``NodeProcesses.stop``'s ``meanwhile``). Standard library only."""

from __future__ import annotations

from collections.abc import Iterable
from typing import get_args

from runtime.agent.rendezvous.events import (
    DaemonExited,
    Event,
    Probed,
    ProcessExited,
    Registered,
    Tick,
    VoteRequested,
    WorldArrived,
)
from runtime.agent.world import World

NEUTRAL = (ProcessExited, DaemonExited, Tick, Probed, VoteRequested, Registered)
"""Events that leave a node's world as it is (an exit of the generation stopped, a vote answered)."""
MAY_CHANGE = tuple(kind for kind in get_args(Event) if kind not in (*NEUTRAL, WorldArrived))
"""The other events, which may give ``Member`` another world first (a takeover's, a fencing's, a rejoin)."""


def superseded(world: World, waiting: Iterable[object], node_id: int) -> bool:
    """Whether the events waiting in the agent's queue make starting ``world``'s processes on node ``node_id``
    pointless. ``Member`` takes the first world that is news to it (``World.replaces``); starting is pointless
    unless the processes carry on into that world (``World.continues``: an elastic change they are told of). Not
    pointless either when nothing waiting is news, or when an event that may change the node's world otherwise
    comes first (:data:`MAY_CHANGE`).

    Args:
        world: the world whose processes are about to start (running).
        waiting: the agent queue's items, oldest first (items that are not events are skipped).
        node_id: this node's id.
    """
    for event in waiting:
        if isinstance(event, WorldArrived) and event.world.replaces(world):
            return not event.world.continues(world, node_id)
        if isinstance(event, MAY_CHANGE):
            return False
    return False
