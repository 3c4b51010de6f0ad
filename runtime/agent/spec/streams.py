"""Where each rank's stdout and stderr go: torchrun's ``--redirects``, ``--tee``,
``--local-ranks-filter`` and ``--duplicate-std{out,err}-filters``, as pure decisions. Standard
library only.

Read from torch 2.13.0, ``torch/distributed/elastic/multiprocessing/api.py`` (``Std.from_str``,
``to_map``, ``DefaultLogsSpecs.reify``): a redirected stream goes to its file only, a teed one to
its file and the console; ranks outside the filter stay off the console (their files are still
written); lines holding any filter string are copied to ``filtered_stdout.log`` /
``filtered_stderr.log`` as well.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from runtime.agent.errors import ParseError

NONE, OUT, ERR, ALL = 0, 1, 2, 3
"""torchrun's ``Std`` values: no stream, stdout, stderr, both."""


@dataclass(frozen=True)
class StdChoice:
    """One ``--redirects``/``--tee`` value: ``N`` for every local rank, or ``LR:N,LR:N`` per local rank.

    Attributes:
        default: the streams (``OUT | ERR`` bits) of local ranks the value does not name.
        per_rank: ``(local_rank, streams)`` pairs.
    """

    default: int = NONE
    per_rank: tuple[tuple[int, int], ...] = ()

    def of(self, local_rank: int) -> int:
        """The streams chosen for ``local_rank``."""
        return dict(self.per_rank).get(local_rank, self.default)

    def encode(self) -> str:
        """The value as torchrun spells it (:func:`parse_std` reverses it)."""
        if not self.per_rank:
            return str(self.default)
        return ",".join(f"{rank}:{streams}" for rank, streams in self.per_rank)


def parse_std(text: str) -> StdChoice:
    """``3``, or ``0:1,1:2``, as torchrun's ``Std.from_str`` takes it.

    Raises:
        ParseError: another form, or a stream value outside 0..3 (the message quotes that value).
    """
    text = text.strip()
    if text.isdigit():
        return StdChoice(_std(text))
    pairs: list[tuple[int, int]] = []
    for item in text.split(","):
        rank, colon, streams = item.partition(":")
        if not colon or not rank.strip().isdigit():
            raise ParseError("must be N or LOCAL_RANK:N,... with N from 0 to 3", "use e.g. 3, or 0:1,1:2")
        pairs.append((int(rank), _std(streams.strip())))
    return StdChoice(NONE, tuple(pairs))


def _std(value: str) -> int:
    if not value.isdigit() or int(value) > ALL:
        raise ParseError(f"{value!r} is not a stream choice", "use 0 (none), 1 (stdout), 2 (stderr) or 3 (both)")
    return int(value)


def parse_ranks(text: str) -> Optional[frozenset[int]]:
    """``--local-ranks-filter``: ``0,1,2``; ``""`` for no filter (``None``).

    Raises:
        ParseError: not a comma-separated list of whole numbers.
    """
    if not text.strip():
        return None
    try:
        return frozenset(int(part) for part in text.split(","))
    except ValueError:
        raise ParseError("must be a comma-separated list of local ranks", "use e.g. 0,1,2") from None


def parse_filters(text: str) -> tuple[str, ...]:
    """``--duplicate-std*-filters``: comma-separated strings, ``,,`` standing for a comma, as torchrun splits them."""
    placeholder = "\0"
    return tuple(item.replace(placeholder, ",") for item in text.replace(",,", placeholder).split(",") if item)


@dataclass(frozen=True)
class StreamPlan:
    """Where one stream of one rank goes.

    Attributes:
        console: copy it to the agent's stream (the launcher's console, a pod's log).
        file: also write it to its own file (``stdout.log``/``stderr.log``).
    """

    console: bool
    file: bool


@dataclass(frozen=True)
class Streams:
    """The job's choices for its ranks' output.

    Attributes:
        redirects: streams written to their file only.
        tee: streams written to their file and the console.
        local_ranks: local ranks whose output reaches the console, or ``None`` for all.
        stdout_filters: stdout lines holding one of these are also copied to ``filtered_stdout.log``.
        stderr_filters: the same for stderr (``filtered_stderr.log``).
    """

    redirects: StdChoice = StdChoice()
    tee: StdChoice = StdChoice()
    local_ranks: Optional[frozenset[int]] = None
    stdout_filters: tuple[str, ...] = ()
    stderr_filters: tuple[str, ...] = ()

    def plan(self, local_rank: int, stream: int) -> StreamPlan:
        """Where ``stream`` (:data:`OUT` or :data:`ERR`) of ``local_rank`` goes."""
        redirected = bool(self.redirects.of(local_rank) & stream)
        teed = bool(self.tee.of(local_rank) & stream)
        shown = self.local_ranks is None or local_rank in self.local_ranks
        return StreamPlan(console=shown and (teed or not redirected), file=redirected or teed)

    @property
    def writes_files(self) -> bool:
        """Whether any rank's stream goes to a file of its own, or any filter copies lines."""
        pairs = self.redirects.per_rank + self.tee.per_rank
        chosen = any((self.redirects.default, self.tee.default, *(v for _, v in pairs)))
        return chosen or bool(self.stdout_filters or self.stderr_filters)
