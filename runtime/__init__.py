"""trainplane's runtime: the in-pod agent (``runtime.agent``), the local launcher and the client.

Importing this package needs the standard library only; httpx and kubernetes are imported by the
client-side modules alone (``runtime.client``, ``runtime.workflow``). The exceptions user code and
callers catch are re-exported here, e.g. ``except runtime.WorkerMembershipChanged``, and
:mod:`membership` (``runtime.membership.poll()`` / ``wait()``) for code that prefers safe points, and
:mod:`distributed` (``runtime.distributed.process_group()``: torch's default process group, kept across
edits and re-formed for each new world; torch is imported only when it is called).
"""

from typing import TYPE_CHECKING, Any

from runtime.agent.errors import (
    CallCancelled,
    CallError,
    CallTimeout,
    JobEnded,
    NodeFailed,
    RemoteError,
    StaleProcessGroup,
    TrainplaneError,
    TransportError,
    Unauthorized,
    WorkerMembershipChanged,
)
from runtime.agent.execution import delivery as membership

if TYPE_CHECKING:
    from runtime.agent.execution import torchgroup as distributed

__all__ = [
    "CallCancelled",
    "CallError",
    "CallTimeout",
    "JobEnded",
    "NodeFailed",
    "RemoteError",
    "StaleProcessGroup",
    "TrainplaneError",
    "TransportError",
    "Unauthorized",
    "WorkerMembershipChanged",
    "distributed",
    "membership",
]


def __getattr__(name: str) -> Any:
    """``runtime.distributed`` is imported on first use: the launcher and the agents never need it.

    Raises:
        AttributeError: ``name`` is not an attribute of this package.
    """
    if name == "distributed":
        from runtime.agent.execution import torchgroup as distributed

        globals()["distributed"] = distributed
        return distributed
    raise AttributeError(f"module 'runtime' has no attribute {name!r}")
