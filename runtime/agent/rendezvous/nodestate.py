"""A node's membership state as values: where it is in the job (:class:`MemberState`), what helper
threads may read of it (:class:`MemberView`), and its running generation (:class:`Running`).
``member.Member`` is their one writer. Standard library only.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Optional

from runtime.agent.execution.procs import ProcExit
from runtime.agent.world import World


class MemberState(enum.Enum):
    """Where a node is in the job."""

    JOINING = "joining"
    """Registering, or registered and waiting for the first world."""
    RUNNING = "running"
    """In a running world, its processes (or its framework daemon) running."""
    REJOINING = "rejoining"
    """Left out of the world (elastic job): registers again after one TTL."""
    ORPHANED = "orphaned"
    """The coordinator is lost and nobody takes over: training goes on until the processes end."""
    FINISHED = "finished"
    """The agent exits (:class:`Exit` was returned)."""


@dataclass(frozen=True)
class MemberView:
    """What the agent's helper threads (heartbeats, reports, routes) read of a node's state: one
    immutable value, replaced whole by the main thread after each event, so a reader never sees half
    a change.

    Attributes:
        world: the node's newest world, or ``None``.
        coordinator: the coordinator's ``(address, port)``; the address is ``""`` while unknown.
        registered: the coordinator took this node's latest registration.
        coordinating: this node holds the coordinator role.
        epoch: its world's epoch, or a later one it voted in for another candidate (``election``):
            sent with its heartbeats and ``/info``.
        known: ``(node id, address, port)`` of the nodes of the last world this node held, which it
            asks for the running world's coordinator (``discovery``) when the job names no peers.
    """

    world: Optional[World]
    coordinator: tuple[str, int]
    registered: bool
    coordinating: bool
    epoch: int = 1
    known: tuple[tuple[int, str, int], ...] = ()


@dataclass
class Running:
    """The processes of one generation on this node."""

    generation: int
    daemon: bool
    exits: dict[int, ProcExit] = field(default_factory=dict)

    def ended(self, local_world_size: int) -> Optional[int]:
        """The exit code of the node's ``local_world_size`` processes once every one has ended (the
        first non-zero, else 0); ``None`` while one runs, or when the node runs none."""
        if not local_world_size or len(self.exits) < local_world_size:
            return None
        return next((e.exit_code for e in self.exits.values() if e.exit_code), 0)
