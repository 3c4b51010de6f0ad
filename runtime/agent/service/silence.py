"""The hang report of a service call: once some of a call's ranks have answered, the ranks still out
are named to the caller every ``hang_report_after`` seconds (the job's setting, default 60), as a
batch job names its straggling ranks. Pure decisions; the hop (``runtime.agent.service.hop``) acts.
Standard library only.
"""

from __future__ import annotations

from typing import Iterable, Optional


class SilenceReport:
    """When to report a call's silent ranks, and what to say.

    Args:
        fn: the callable, ``module:qualname``.
        ranks: every rank the call runs on.
        every: seconds between reports, counted from the first answer (> 0).
    """

    def __init__(self, fn: str, ranks: Iterable[int], every: float) -> None:
        self._fn = fn
        self._ranks = sorted(ranks)
        self._every = every
        self._first: Optional[float] = None
        self._last: Optional[float] = None

    def answered(self, now: float) -> None:
        """A rank (or a child's ranks) answered at ``now`` (monotonic seconds)."""
        if self._first is None:
            self._first = now

    def wait(self, now: float) -> float:
        """Seconds until the next report could be due (until the first answer: one period, to look again)."""
        if self._first is None:
            return self._every
        return max(0.0, (self._last if self._last is not None else self._first) + self._every - now)

    def report(self, answered: Iterable[int], now: float) -> Optional[str]:
        """The report due at ``now``, given the ranks that have answered, or ``None`` (none due)."""
        if self._first is None or self.wait(now) > 0:
            return None
        self._last = now  # due now: the next one is a period away, whatever this one says
        done = set(answered)
        pending = [r for r in self._ranks if r not in done]
        if not pending or not done:
            return None
        return (f"trainplane: call {self._fn}: rank(s) {_ranks(sorted(done))} answered; waiting for rank(s) "
                f"{_ranks(pending)}, silent for {now - self._first:.0f} s since the first answer")


def _ranks(ranks: list[int]) -> str:
    return ", ".join(str(r) for r in ranks)
