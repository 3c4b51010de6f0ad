"""What happens to a node: the events ``member.Member`` takes (plain values), and the agent loop's
:class:`Inbox` of them. Standard library only."""

from __future__ import annotations

import queue
import threading
from collections import deque
from dataclasses import dataclass
from typing import Callable, Generic, Optional, TypeVar, Union

from runtime.agent.execution.procs import ProcExit
from runtime.agent.rendezvous.election import Ballot, Verdict
from runtime.agent.world import World


@dataclass(frozen=True)
class WorldArrived:
    """A world, pushed by the coordinator or its parent, or carried by a heartbeat's answer."""

    world: World


@dataclass(frozen=True)
class ProcessExited:
    """One of this node's user processes ended."""

    exit: ProcExit


@dataclass(frozen=True)
class DaemonExited:
    """This node's framework daemon ended."""

    name: str
    exit: ProcExit


@dataclass(frozen=True)
class CoordinatorLost:
    """The coordinator ``(node_id, addr, port)`` has not heard this node for ``silent_for`` seconds: its
    heartbeats to it failed, or (``via``) its tree parent, which answers, says so of its own."""

    coordinator: tuple[int, str, int]
    silent_for: float
    via: Optional[int] = None


@dataclass(frozen=True)
class CoordinatorBack:
    """The coordinator answers again after ``failures`` failed heartbeats (0: it hears this node again
    through its tree parent, which had said it did not)."""

    failures: int


@dataclass(frozen=True)
class SignalReceived:
    """The agent received signal ``signum``."""

    signum: int


@dataclass(frozen=True)
class Removed:
    """The coordinator no longer counts this node (its heartbeat was refused)."""

    reason: str


@dataclass(frozen=True)
class Fatal:
    """Something this node cannot go on after (its registration was refused, say); ``exit_code`` is the
    agent's (0 when the job finishes without this node: ``RendezvousClosed``)."""

    message: str
    exit_code: int


@dataclass(frozen=True)
class CoordinatorFound:
    """Registration or discovery found the coordinator at ``address`` (``(address, port)``).

    ``running``: it coordinates a world that already runs without this node (``discovery``), so a
    node that started with the coordinator role (node 0's replaced pod) gives it up.
    """

    address: tuple[str, int]
    running: bool = False


@dataclass(frozen=True)
class Registered:
    """The coordinator took this node's registration."""


@dataclass(frozen=True)
class VoteRequested:
    """A candidate asks for this node's vote (``POST /vote``); ``reply`` takes the answer."""

    ballot: Ballot
    reply: Callable[[Verdict], None]


@dataclass(frozen=True)
class Probed:
    """Coordinator node ``prober``, of ``epoch``, asks whether this node still counts it (``POST /probe``,
    ``lease``); ``reply`` takes the answer (``election.Election.confirm``), decided in order with the ballots."""

    prober: int
    epoch: int
    reply: Callable[[Verdict], None]


@dataclass(frozen=True)
class VotesCounted:
    """The answers to this node's ``ballot``: ``granted`` votes (its own included), the highest epoch a
    voter knew (``seen``), the newest world a voter had when newer than this node's, and how many of
    the nodes asked answered at all (``answered``; ``None``: not counted)."""

    ballot: Ballot
    granted: tuple[int, ...]
    seen: int
    newer: Optional[World] = None
    answered: Optional[int] = None


@dataclass(frozen=True)
class Deposed:
    """This node's coordinator found a newer epoch (``reason``): its world is no longer the job's.
    ``address``: the new coordinator's ``(address, port)``, ``("", port)`` when unknown."""

    reason: str
    address: tuple[str, int]


@dataclass(frozen=True)
class Tick:
    """Time passed (the agent's loop wakes at least every ``WORKER_TICK``)."""


Event = Union[WorldArrived, ProcessExited, DaemonExited, CoordinatorLost, CoordinatorBack, SignalReceived, Removed,
              Fatal, CoordinatorFound, Registered, VoteRequested, Probed, VotesCounted, Deposed, Tick]


T = TypeVar("T")
K = TypeVar("K")


class Inbox(Generic[T]):
    """The agent loop's queue of events, waited on with the agent's ``wait`` seam, so that a fake
    clock drives the loop's time-driven checks as it drives the heartbeat thread. Any thread may put; one thread
    (the agent's main thread) gets and takes.

    Args:
        wait: waits on an event for at most that many seconds; whether it was set.
    """

    def __init__(self, wait: Callable[[threading.Event, float], bool] = threading.Event.wait) -> None:
        self._items: deque[T] = deque()
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._wait = wait

    def put(self, item: T) -> None:
        """Add ``item`` (any thread)."""
        with self._lock:
            self._items.append(item)
        self._ready.set()

    def get(self, timeout: float) -> T:
        """The oldest item, waiting up to ``timeout`` seconds for one.

        Raises:
            queue.Empty: none came within ``timeout``.
        """
        if not self._items:
            self._ready.clear()
            if not self._items:
                self._wait(self._ready, timeout)
        with self._lock:
            if not self._items:
                raise queue.Empty
            return self._items.popleft()

    def take(self, kind: type[K]) -> list[K]:
        """Remove every waiting item of type ``kind`` and return them, oldest first; the others keep their order."""
        with self._lock:
            taken = [item for item in self._items if isinstance(item, kind)]
            if taken:
                kept = [item for item in self._items if not isinstance(item, kind)]
                self._items.clear()
                self._items.extend(kept)
        return taken

    def waiting(self) -> list[T]:
        """The waiting items, oldest first, left in place."""
        with self._lock:
            return list(self._items)

    def empty(self) -> bool:
        """Whether no item waits."""
        return not self._items
