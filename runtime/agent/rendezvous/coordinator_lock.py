"""This node's coordinator, if it holds the role: ``Coordinator`` behind the lock its decisions are
taken under. HTTP handler threads, probe and push threads and the agent's loop all decide through it;
the actions go to the agent's loop. Standard library only.
"""

from __future__ import annotations

import threading
from typing import Callable, Optional, TypeVar

from runtime.agent.rendezvous.actions import CoordinatorAction
from runtime.agent.rendezvous.coordinator import Coordinator

T = TypeVar("T")


class Coordination:
    """The coordinator role on this node.

    Args:
        coordinator: the coordinator, when this node starts with the role (node 0); ``None`` otherwise.
    """

    def __init__(self, coordinator: Optional[Coordinator] = None) -> None:
        self._coordinator = coordinator
        self._lock = threading.Lock()

    @property
    def active(self) -> bool:
        """Whether this node holds the role."""
        return self._coordinator is not None

    def decide(self, decision: Callable[[Coordinator], list[CoordinatorAction]]) -> list[CoordinatorAction]:
        """Take ``decision`` under the lock; no actions when this node does not coordinate.

        Raises:
            Whatever ``decision`` raises (``MembershipRefused`` for a refused request).
        """
        return self.attempt(decision) or []

    def attempt(self, decision: Callable[[Coordinator], list[CoordinatorAction]]) -> Optional[list[CoordinatorAction]]:
        """:meth:`decide`, but ``None`` when this node does not coordinate: checked under the same lock, so a role
        given up meanwhile is not taken for a decision with nothing to do.

        Raises:
            Whatever ``decision`` raises.
        """
        return self.use(decision)

    def use(self, step: Callable[[Coordinator], T]) -> Optional[T]:
        """``step`` with the coordinator under the lock (a view, or a decision without actions such as a
        heartbeat); ``None`` when this node does not coordinate.

        Raises:
            Whatever ``step`` raises.
        """
        with self._lock:
            return step(self._coordinator) if self._coordinator is not None else None

    def resign(self) -> None:
        """Give the role up before using it: the job already runs under another coordinator (this
        node 0 replaces one that was lost, ``discovery``)."""
        with self._lock:
            self._coordinator = None

    def take_over(self, coordinator: Coordinator,
                  decision: Callable[[Coordinator], list[CoordinatorAction]]) -> list[CoordinatorAction]:
        """Hold the role from now on, with ``coordinator``; its first ``decision``'s actions."""
        with self._lock:
            self._coordinator = coordinator
            return decision(coordinator)
