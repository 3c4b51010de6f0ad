"""The rendezvous before the first world: quorum progress lines, the last call, the quorum timeout.
Pure logic on the coordinator's monotonic clock; ``coordinator.Coordinator`` holds one
:class:`Forming`. Standard library only."""

from __future__ import annotations

from typing import NamedTuple, Optional

from runtime.agent.errors import QuorumTimeout
from runtime.agent.spec.job import JobSpec

LAST_CALL = 1.0
"""Seconds to wait for more nodes once quorum is met but not every node has registered
(torchrun's ``last_call_timeout`` idea, shorter)."""
PROGRESS_EVERY = 5.0
"""Seconds between repeated quorum progress lines."""
PROGRESS_MIN_GAP = 1.0
"""Fewest seconds between two progress lines, so a thousand registrations make a few lines, not a thousand."""


class Step(NamedTuple):
    """What the rendezvous decides at one moment: a progress line (``""`` for none), whether the world
    forms now, and the quorum timeout's error once it expired."""

    progress: str
    form: bool
    timeout: Optional[QuorumTimeout]


class Forming:
    """The rendezvous of a job.

    Args:
        spec: the job spec (workers, quorum, quorum timeout).
        started: the coordinator's start, monotonic seconds.
    """

    def __init__(self, spec: JobSpec, started: float) -> None:
        self._spec = spec
        self._started = started
        self._quorum_at: Optional[float] = None
        self._last_progress = -PROGRESS_EVERY
        self._progress_count = -1

    def registered(self, count: int, now: float) -> None:
        """``count`` nodes have registered at ``now``: quorum may be met."""
        if count >= self._spec.quorum and self._quorum_at is None:
            self._quorum_at = now

    def step(self, registered: list[int], now: float) -> Step:
        """The decision at ``now`` with the node ids ``registered`` so far."""
        spec, count = self._spec, len(registered)
        since = now - self._last_progress
        complete = count >= spec.workers
        progress = ""
        if (count != self._progress_count and (since >= PROGRESS_MIN_GAP or complete)) or since >= PROGRESS_EVERY:
            self._progress_count, self._last_progress = count, now
            progress = f"{count}/{spec.workers} nodes registered (quorum {spec.quorum})"
        if complete or (self._quorum_at is not None and now - self._quorum_at >= LAST_CALL):
            return Step(progress, True, None)
        if now - self._started >= spec.quorum_timeout:
            missing = [i for i in range(spec.workers) if i not in registered]
            return Step(progress, False, QuorumTimeout(missing, count, spec.quorum, spec.quorum_timeout))
        return Step(progress, False, None)
