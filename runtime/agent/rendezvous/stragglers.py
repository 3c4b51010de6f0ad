"""Hung and straggling ranks, and the job's time limit: what the coordinator says about ranks that
neither exit nor write. Pure logic on the coordinator's monotonic clock. Standard library only.

Every node reports its ranks with its heartbeats (the coordinator's own node with every tick): for
each local rank, whether and how it exited, and for how many seconds it has written nothing.
:meth:`Stragglers.check` then decides two things:

* once some rank of the world has exited 0, every rank still running that has been silent for
  ``hang_report_after`` seconds is reported (which rank, on which node, silent since when), again
  each time it has been silent that long once more;
* past the job's ``timeout`` (seconds from the job's start, carried in the world across a
  coordinator's takeover: ``World.job_elapsed``) the job is over: the verdict's message is the
  report of every rank still running (``contract.EXIT_TIMEOUT``).

In a job that beats along a tree (``tree_threshold`` nodes or more), a parent keeps what its
children's beats said of their ranks (:class:`SubtreeRanks`) and forwards it with its own beat, their
silences aged by the time held, so a hung rank is named at any size.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, NamedTuple, Optional, Sequence

from runtime.agent.world import Node, World


class RankState(NamedTuple):
    """One rank as its node last reported it.

    Attributes:
        rank: global rank.
        exit_code: its exit code, or ``None`` while it runs.
        silent: seconds it had written nothing when reported.
        at: the coordinator's monotonic time of the report.
    """

    rank: int
    exit_code: Optional[int]
    silent: float
    at: float


class Stragglers:
    """The coordinator's view of every rank's activity.

    Args:
        hang_report_after: seconds of silence after which a running rank is reported, once another
            rank has finished.
        timeout: the job's time limit, seconds from ``started``; ``None`` for none.
        started: the coordinator's start, monotonic seconds.
        wall: wall clock, seconds since the epoch (only to say "since when").
    """

    def __init__(self, hang_report_after: float, timeout: Optional[float], started: float, *,
                 wall: Callable[[], float] = time.time) -> None:
        self.hang_report_after = hang_report_after
        self.timeout = timeout
        self._started = started
        self._wall = wall
        self._ranks: dict[int, tuple[int, RankState]] = {}
        self._reported: dict[int, float] = {}
        self._generation = 0

    def note(self, node_id: int, entries: Sequence[Sequence[Any]], generation: int, now: float) -> None:
        """Node ``node_id``'s report of its ranks in ``generation``: ``[rank, exit code or null, seconds
        silent]`` each (``LocalProcesses.activity``); a malformed entry is skipped."""
        if generation < self._generation:
            return
        if generation > self._generation:
            self._generation, self._ranks, self._reported = generation, {}, {}
        for entry in entries:
            try:
                rank, code, silent = int(entry[0]), entry[1], float(entry[2])
            except (TypeError, ValueError, IndexError):
                continue
            self._ranks[rank] = (node_id, RankState(rank, None if code is None else int(code), silent, now))

    def check(self, world: World, now: float) -> tuple[list[str], Optional[str]]:
        """``(lines to say, the timeout verdict's message or None)`` at ``now`` for running ``world``."""
        if self.timeout is not None and now - self._started >= self.timeout:
            running = [self._describe(world, rank, silent) for rank, silent in self._running(world, now)]
            what = "; ".join([*running, *self._unreported(world)]) or "no rank reported running"
            # The same verdict on a pod, where the limit is active_deadline_seconds less a margin, not --timeout
            return [], f"time limit of {self.timeout:g} s reached; still running: {what}"
        finished = self._finished(world)
        if not finished:
            return [], None
        lines = []
        for rank, silent in self._running(world, now):
            if silent >= self.hang_report_after and now - self._reported.get(rank, float("-inf")) >= \
                    self.hang_report_after:
                self._reported[rank] = now
                lines.append(f"straggling after rank {finished[0]} finished: "
                             f"{self._describe(world, rank, silent)}")
        return lines, None

    def finishing(self, world: World) -> Optional[str]:
        """Why ``world``'s rendezvous is closed to newcomers, or ``None``: once a rank of its generation has
        exited 0 the job is finishing, and a node admitted now would make a new world whose ranks wait for
        ranks that are gone (torch elastic closes its rendezvous then and tells late nodes so)."""
        finished = self._finished(world)
        if not finished:
            return None
        return f"the job is finishing: rank {finished[0]} of generation {world.generation} exited 0"

    def _finished(self, world: World) -> list[int]:
        """The ranks of ``world``'s generation reported to have exited 0, lowest first."""
        if world.generation != self._generation:
            return []
        return sorted(r.rank for _, r in self._ranks.values() if r.exit_code == 0)

    def _running(self, world: World, now: float) -> list[tuple[int, float]]:
        """``(rank, seconds silent now)`` of every rank reported running in ``world``'s generation."""
        if world.generation != self._generation:
            return []
        return sorted((rank, state.silent + now - state.at) for rank, (_, state) in self._ranks.items()
                      if state.exit_code is None)

    def _describe(self, world: World, rank: int, silent: float) -> str:
        node_id = self._ranks[rank][0]
        node = next((n for n in world.nodes if n.node_id == node_id), None)
        since = time.strftime("%H:%M:%S", time.localtime(self._wall() - silent))
        return (f"rank {rank} on node {node_id}{f' ({node.addr})' if node else ''}: running, no output for "
                f"{silent:.0f} s (since {since})")

    def _unreported(self, world: World) -> list[str]:
        """The nodes of ``world`` with processes whose ranks were never reported (beating along a tree)."""
        known = {node_id for node_id, _ in self._ranks.values()}
        nodes: list[Node] = [n for n in world.nodes if n.num_proc and n.node_id not in known]
        return [f"node {n.node_id} ({n.addr}), ranks not reported" for n in nodes]


def parse_ranks(entries: Any) -> list[list[Any]]:
    """``[rank, exit code or null, seconds silent]`` entries of a beat, the malformed ones left out."""
    out: list[list[Any]] = []
    for entry in entries if isinstance(entries, list) else ():
        try:
            out.append([int(entry[0]), None if entry[1] is None else int(entry[1]), float(entry[2])])
        except (TypeError, ValueError, IndexError, KeyError):
            continue
    return out


class SubtreeRanks:
    """What a tree parent heard of its descendants' ranks (``node_id -> ranks``), forwarded with its
    beats. Thread-safe: HTTP handler threads note, the heartbeat thread forwards."""

    def __init__(self) -> None:
        self._ranks: dict[int, tuple[list[list[Any]], float]] = {}
        self._lock = threading.Lock()

    def note(self, node_id: int, entries: Any, now: float) -> None:
        """Node ``node_id``'s ranks as its beat (at monotonic ``now``) gave them (:func:`parse_ranks`)."""
        ranks = parse_ranks(entries)
        if ranks:
            with self._lock:
                self._ranks[node_id] = (ranks, now)

    def forward(self, now: float, keep: Callable[[int], bool]) -> dict[str, list[list[Any]]]:
        """The ranks of every node ``keep`` accepts (the world's), silences aged to ``now``."""
        with self._lock:
            held = dict(self._ranks)
        return {str(node_id): [[rank, code, round(silent + now - at, 3)] for rank, code, silent in ranks]
                for node_id, (ranks, at) in held.items() if keep(node_id)}
