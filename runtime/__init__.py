"""trainplane's runtime: the in-pod agent (``runtime.agent``), the local launcher and the client.

Importing this package needs the standard library only; httpx and kubernetes are imported by the
client-side modules alone (``runtime.client``, ``runtime.workflow``). The exceptions user code and
callers catch are re-exported here, e.g. ``except runtime.WorkerMembershipChanged``, and
:mod:`membership` (``runtime.membership.poll()`` / ``wait()``) for code that prefers safe points, and
:mod:`distributed` (``runtime.distributed.process_group()``: torch's default process group, kept across
edits and re-formed for each new world; torch is imported only when it is called).
"""

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
