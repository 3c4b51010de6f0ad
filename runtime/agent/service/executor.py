"""The seam between a node's call dispatch and whatever runs the call on the node's ranks.

``WorkerPool`` (``pool.py``) runs calls in the node's long-lived user processes;
``InProcessExecutor`` (``inprocess.py``) runs them in the agent's own process, for lightweight agents
in tests and benchmarks. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, Union

from runtime.agent.errors import TrainplaneError
from runtime.agent.service.calls import Invocation


@dataclass(frozen=True)
class RankDone:
    """One rank returned: ``value`` is its packed result (``wire.pack_result``)."""

    rank: int
    value: Any


@dataclass(frozen=True)
class RankFailed:
    """One rank did not return a result: the function raised, the process died, or it was cancelled."""

    rank: int
    error: TrainplaneError


RankEvent = Union[RankDone, RankFailed]


@dataclass(frozen=True)
class LocalCall:
    """A call to run on every rank of this node.

    Attributes:
        call_id: the call's id, for :meth:`LocalExecutor.cancel`.
        invocation: what to run.
        post: receives one event per rank, from any thread, in completion order.
    """

    call_id: str
    invocation: Invocation
    post: Callable[[RankEvent], None]


class LocalExecutor(Protocol):
    """Runs calls on one node's ranks."""

    ranks: tuple[int, ...]
    """Global ranks this executor serves, ascending."""

    def submit(self, call: LocalCall) -> None:
        """Start ``call`` on every rank and return at once; results arrive through ``call.post``."""

    def cancel(self, call_id: str) -> None:
        """Stop ``call_id`` on every rank still running it, so the next call finds them free.

        Ranks still running it post nothing more that matters: the dispatcher has moved on.
        """

    def stop(self, grace: float) -> None:
        """Release the ranks (processes, threads); ``grace`` seconds before anything is killed."""
