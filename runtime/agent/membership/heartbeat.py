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

import threading
from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class HeartbeatTiming:
    """Heartbeat settings, seconds.

    Attributes:
        interval: first interval after a change.
        ttl: a member not heard from for this long is dead; for twice this long, removed.
    """

    interval: float = 0.25
    ttl: float = 3.0
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

    def grace(self, now: float) -> None:
        """Treat every member as just heard from (after this host itself stalled)."""
        with self._lock:
            for node_id in self._seen:
                self._seen[node_id] = now
