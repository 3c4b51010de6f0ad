"""trainplane's runtime: the in-pod agent (``runtime.agent``), the local launcher and the client.

Importing this package needs the standard library only; httpx and kubernetes are imported by the
client-side modules alone (``runtime.client``, ``runtime.workflow``). The exceptions user code and
callers catch are re-exported here, e.g. ``except runtime.WorkerMembershipChanged``, and
:mod:`membership` (``runtime.membership.poll()`` / ``wait()``) for code that prefers safe points.
"""

from runtime.agent.errors import (
    CallCancelled,
    CallError,
    CallTimeout,
    JobEnded,
    NodeFailed,
    RemoteError,
    TrainplaneError,
    TransportError,
    Unauthorized,
    WorkerMembershipChanged,
)
from runtime.agent.execution import delivery as membership

__all__ = [
    "CallCancelled",
    "CallError",
    "CallTimeout",
    "JobEnded",
    "NodeFailed",
    "RemoteError",
    "TrainplaneError",
    "TransportError",
    "Unauthorized",
    "WorkerMembershipChanged",
    "membership",
]
