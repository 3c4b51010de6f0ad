"""Heartbeat timing and liveness bookkeeping. Pure logic; the agent does the sending.

Timing: a node beats every ``interval`` seconds while the world is new, doubling after each
successful beat once membership is stable, capped so that a live member is always seen well within
the stale TTL however deep the liveness tree: news of a node ``h`` hops from the coordinator can
wait up to one cap at each hop, so the cap is ``ttl / (h + 2)`` (``ttl / 3`` flat, ``ttl / 4`` for
a two-level tree, which at width 50 covers 2,551 nodes). Failed beats back off the same way under
the same cap.

Liveness: every time is the *receiver's* monotonic clock. An aggregating parent forwards, for each
descendant, how many seconds ago it last heard from it (an age, a duration), never a timestamp, so
no two hosts' clocks are ever compared (unlike torchrun's keep-alives, judged on another host's
clock). Past one TTL a member is dead; past two it is removed from the membership list.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, replace
from typing import Callable, Mapping, Optional

from runtime.agent.rendezvous.events import CoordinatorBack, CoordinatorLost, Event, Removed, WorldArrived
from runtime.agent.rendezvous.tree import Layout, layout
from runtime.agent.spec.status import RUNNING
from runtime.agent.world import Node, World

UPSTREAM = "upstream_s"
"""Key of a tree parent's answer to a heartbeat: seconds since the coordinator last heard the parent
(``HeartbeatState.upstream_age``)."""
TO_COORDINATOR = "to_coordinator"
"""Key of a heartbeat's body: ``true`` when it is sent to the coordinator (not to a tree parent); a
node that does not coordinate refuses such a beat (404) rather than answer it."""
LATE_BEAT = 0.25
"""Fraction of a beat cap a direct reporter's beat may come late (scheduling, a busy host) before the
coordinator probes it."""


def reports_to_coordinator(world: World, position: int, tree: Layout) -> bool:
    """Whether the node at ``position`` of ``world`` beats to the coordinator itself (a flat world, the
    root, or a child of the coordinator's position in ``tree``) rather than to a tree parent."""
    up = tree.parent(position)
    return up is None or not tree.tree or world.nodes[up].node_id == world.coordinator[0]


@dataclass(frozen=True)
class HeartbeatTiming:
    """Heartbeat settings, seconds.

    Attributes:
        interval: first interval after a change.
        ttl: a member not heard from for this long is dead; for twice this long, removed.
    """

    interval: float
    ttl: float
    hops: int = 1

    @property
    def cap(self) -> float:
        """The longest interval between beats, seconds: ``ttl / (hops + 2)``, where ``hops`` is how
        far the deepest member's liveness travels to the coordinator (see ``tree.Layout.hops``)."""
        return self.ttl / (max(self.hops, 1) + 2)

    @property
    def probe_timeout(self) -> float:
        """Seconds the coordinator gives a direct probe (``GET /healthz``) of a silent node: a third
        of the TTL. Probing starts that long before the TTL runs out."""
        return self.ttl / 3

    @property
    def direct_suspect_after(self) -> float:
        """Seconds of silence after which the coordinator probes a node that beats to it directly:
        one cap and :data:`LATE_BEAT` of another (such a node beats at least every cap)."""
        return self.cap * (1 + LATE_BEAT)

    @property
    def direct_probe_timeout(self) -> float:
        """Seconds such a probe may take: the rest of two caps, so a stopped node that beats to the
        coordinator directly is lost at most two beat intervals after its last beat."""
        return self.cap * (1 - LATE_BEAT)

    def next_interval(self, previous: float) -> float:
        """The interval after ``previous`` (0 for the first beat): doubled, within [interval, cap]."""
        return min(max(previous * 2, self.interval), self.cap)

    def first_delay(self, fraction: float) -> float:
        """Delay of the first beat after a new world: ``fraction`` (uniform in [0, 1)) of the cap.

        Every node installs a new world at about the same moment; spreading their first beats over
        one cap keeps a large world from beating its parents all at once, and still reaches the
        coordinator within the TTL (the cap leaves a cap per hop).
        """
        return fraction * self.cap


class Liveness:
    """When each member was last heard from, on this host's monotonic clock. Thread-safe: an
    aggregating parent records beats in its HTTP handler threads while its heartbeat thread reads."""

    def __init__(self) -> None:
        self._seen: dict[int, float] = {}
        self._lock = threading.Lock()

    def beat(self, node_id: int, now: float, age: float = 0.0) -> None:
        """Record that ``node_id`` was alive ``age`` seconds before ``now``; older news is ignored."""
        seen = now - max(0.0, age)
        with self._lock:
            if seen > self._seen.get(node_id, float("-inf")):
                self._seen[node_id] = seen

    def merge(self, ages: Mapping[int, float], now: float) -> None:
        """Record a batch of ``node_id -> age`` forwarded by an aggregating child."""
        for node_id, age in ages.items():
            self.beat(node_id, now, age)

    def ages(self, now: float) -> dict[int, float]:
        """``node_id -> seconds since last heard``, for forwarding to a parent."""
        with self._lock:
            return {node_id: now - seen for node_id, seen in self._seen.items()}

    def age(self, node_id: int, now: float) -> float:
        """Seconds since ``node_id`` was last heard from; infinity if never."""
        with self._lock:
            return now - self._seen.get(node_id, float("-inf"))

    def forget(self, node_id: int) -> None:
        """Drop a member."""
        with self._lock:
            self._seen.pop(node_id, None)


HEARTBEAT_LOG_EVERY = 20
"""After the first failed heartbeat in a row, log only every this many more."""


@dataclass(frozen=True)
class Beat:
    """One heartbeat to send.

    Attributes:
        parent: the tree parent it goes to, or ``None`` for the coordinator.
        generation: the world generation the node is in (0 while it waits for its first).
        ages: whether it carries the node's subtree's liveness (every beat in a world does).
    """

    parent: Optional[Node]
    generation: int
    ages: bool


@dataclass(frozen=True)
class BeatEffects:
    """What a heartbeat's outcome means: events for the node's :class:`~runtime.agent.rendezvous.member.Member`
    and lines for its log."""

    events: tuple[Event, ...] = ()
    lines: tuple[str, ...] = ()


@dataclass(frozen=True)
class ParentAnswer:
    """What a tree parent does with a child's beat (``routes.AgentRoutes._beat``).

    Attributes:
        refused: the child is not in the parent's world, which is the child's or newer (409: register again).
        keeps: the parent keeps the child's news for its own next beat upward; not a child that voted for a
            rival (its epoch past the parent's): forwarded, it would count as heard at the old coordinator.
        tells_age: the parent answers with its age toward the coordinator (:data:`UPSTREAM`): only in the
            child's own world, so about the child's own coordinator.
    """

    refused: bool
    keeps: bool
    tells_age: bool


def parent_answer(world: Optional[World], child: int, generation: int, epoch: int, own_epoch: int) -> ParentAnswer:
    """The parent's decision for a beat of node ``child`` in its world of ``generation`` at ``epoch``, the parent
    holding ``world`` (``None``: none yet) at ``own_epoch``."""
    behind = world is None or world.generation < generation
    return ParentAnswer(refused=not behind and world is not None and not world.has(child), keeps=epoch <= own_epoch,
                        tells_age=world is not None and world.generation == generation)


class HeartbeatState:
    """The heartbeat loop's decisions, apart from its sending: when the next beat is due, where it goes
    (the node's parent in the tree, or the coordinator), and what each outcome means. Pure: the
    heartbeat thread (``rendezvous.heartbeat_thread``) waits :meth:`delay`, asks :meth:`next`, sends, and
    reports the outcome to :meth:`answered`, :meth:`refused` or :meth:`failed`.

    A beat refused by a parent (the child is not in its world yet) goes straight to the coordinator
    once; one the coordinator refuses means this node must register again. A failed beat backs off as
    a successful one does; a coordinator silent for more than the TTL is reported lost once per
    coordinator, and its return once.

    Args:
        timing: the heartbeat settings.
        node_id: this node's id.
        width: children per node in the tree.
        threshold: members at or above which the tree is used.
        now: the current monotonic time, seconds.
        jitter: uniform in [0, 1): spreads the first beats after a new world.
    """

    def __init__(self, timing: HeartbeatTiming, node_id: int, *, width: int, threshold: int, now: float,
                 jitter: Callable[[], float] = random.random) -> None:
        self.timing = timing
        self._node_id = node_id
        self._width = width
        self._threshold = threshold
        self._jitter = jitter
        self._interval = 0.0
        self._generation = 0
        self._reached = now
        self._failures = 0
        self._direct = False
        self._toward: Optional[tuple[int, str, int]] = None
        self._lost_sent: Optional[tuple[int, str, int]] = None

    def upstream_age(self, now: float) -> float:
        """Seconds since this node last knew the coordinator heard it: its own beat answered by the
        coordinator, or by a tree parent that had been heard that long before (the parent's own
        :meth:`upstream_age`, carried in its answer). A tree parent answers its children's beats with
        it, so a coordinator lost above a parent is lost to the parent's whole subtree, as a direct
        reporter's failed beats tell it (the fencing rule's voters are every node, not only the ones
        that beat to the coordinator). 0 while this node beats to nobody or has no world yet."""
        return max(0.0, now - self._reached) if self._toward is not None else 0.0

    def children(self, world: World) -> tuple[Node, ...]:
        """The nodes of ``world`` whose beats come to this node as their tree parent: none in a flat world, when
        this node coordinates (its children beat to it as the coordinator), or when it is not in ``world`` or
        that does not run. The coordinator, which beats to nobody, is never one (it may sit below this node
        when it is not at the root: an elastic job's node 0 that came back)."""
        if world.status != RUNNING or not world.has(self._node_id) or world.coordinator[0] == self._node_id:
            return ()
        tree = layout(len(world.nodes), width=self._width, threshold=self._threshold)
        position = world.node_rank_of(self._node_id)
        return tuple(world.nodes[c] for c in tree.children(position)
                     if world.nodes[c].node_id != world.coordinator[0] and not reports_to_coordinator(world, c, tree))

    def delay(self) -> float:
        """Seconds to wait before asking :meth:`next` (a new world wakes the thread sooner)."""
        return self._interval or self.timing.interval

    def next(self, world: Optional[World], registered: bool, coordinating: bool, now: float) -> Optional[Beat]:
        """The beat to send now, or ``None`` (wait :meth:`delay` and ask again).

        Args:
            world: the node's world, or ``None``.
            registered: the node has registered (a registered node without a world asks for it).
            coordinating: the node is the coordinator (which beats to nobody).
            now: the current monotonic time, seconds.
        """
        waiting = world is None and registered
        if coordinating or (not waiting and (world is None or world.status != RUNNING
                                             or not world.has(self._node_id))):
            self._interval, self._reached = 0.0, now
            return None
        self._toward = world.coordinator if world is not None else None
        if world is None:
            # Registered, no world yet: ask once per TTL (a lost push heals; the coordinator is not
            # flooded while a large world forms).
            if self._interval < self.timing.ttl:
                self._interval = self.timing.ttl
                return None
            return Beat(None, 0, ages=False)
        tree = layout(len(world.nodes), width=self._width, threshold=self._threshold)
        if world.generation != self._generation:
            self.timing = replace(self.timing, hops=tree.hops)
            # A new world is the coordinator's news: its age toward this node starts again.
            self._generation, self._interval = world.generation, self.timing.first_delay(self._jitter())
            self._reached = max(self._reached, now)
            return None
        position = world.node_rank_of(self._node_id)
        up = tree.parent(position)
        if self._direct or up is None or reports_to_coordinator(world, position, tree):
            return Beat(None, self._generation, ages=True)
        return Beat(world.nodes[up], self._generation, ages=True)

    def answered(self, beat: Beat, world: Optional[World], now: float,
                 upstream: Optional[float] = None) -> BeatEffects:
        """The beat was answered (with a newer ``world``, or ``None``): by the coordinator, or by a tree
        parent whose own news last reached the coordinator ``upstream`` seconds before (``None``: the
        parent did not say, not being in this node's world; nothing is learnt of the coordinator then).

        A parent's answer past the TTL means the coordinator lost above it: reported once, as a
        direct reporter's failed beats are (:meth:`failed`); its return, once.
        """
        events: list[Event] = []
        via = beat.parent.node_id if beat.parent is not None else None
        known = via is None or upstream is not None
        if known:
            self._reached = max(self._reached, now - (upstream or 0.0))
        silent = now - self._reached
        if via is not None and upstream is not None and silent > self.timing.ttl and self._toward is not None:
            if self._lost_sent != self._toward:
                self._lost_sent = self._toward
                events.append(CoordinatorLost(self._toward, silent, via=via))
        elif known and (self._failures or self._lost_sent is not None):
            events.append(CoordinatorBack(self._failures))
            self._lost_sent = None
        self._failures, self._direct = 0, False
        self._interval = self.timing.ttl if not beat.ages else self.timing.next_interval(self._interval)
        if world is not None:
            events.append(WorldArrived(world))
        return BeatEffects(tuple(events))

    def refused(self, beat: Beat, reason: str) -> BeatEffects:
        """The beat's receiver does not count this node: a parent (then go to the coordinator at once)
        or the coordinator (then register again)."""
        if beat.parent is not None:
            self._direct, self._interval = True, 0.0
            return BeatEffects()
        self._interval = self.timing.interval
        return BeatEffects((Removed(f"the coordinator no longer counts this node ({reason})"),))

    def failed(self, beat: Beat, world: Optional[World], where: str, error: str, now: float) -> BeatEffects:
        """The beat to ``where`` got no answer (or a bad one): back off; a coordinator silent for more
        than the TTL is lost.

        A silent parent is the coordinator's to probe (and its orphans after it): going straight to the
        coordinator instead made every child of a busy parent a herd.
        """
        self._failures += 1
        lines: tuple[str, ...] = ()
        if self._failures == 1 or self._failures % HEARTBEAT_LOG_EVERY == 0:
            lines = (f"heartbeat to {where} failed ({self._failures} in a row): {error}",)
        self._direct = False
        self._interval = self.timing.next_interval(self._interval)
        silent = now - self._reached
        if world is not None and beat.parent is None and silent > self.timing.ttl \
                and self._lost_sent != world.coordinator:
            self._lost_sent = world.coordinator
            return BeatEffects((CoordinatorLost(world.coordinator, silent),), lines)
        return BeatEffects((), lines)
