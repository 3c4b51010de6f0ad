"""Exceptions of the in-pod runtime. Standard library only.

Tree::

    TrainplaneError
    ├── ConfigError (also ValueError)      bad settings: names the field, the value and the fix
    ├── RendezvousError                    the world could not be formed
    │   └── QuorumTimeout                  quorum not met in time; names the missing node ids
    ├── TransportError                     an HTTP exchange between agents failed
    │   └── Unauthorized                   401: missing or wrong job token
    └── JobFailed                          batch job ended with a failing rank
"""

from __future__ import annotations

from typing import Sequence


class TrainplaneError(Exception):
    """Root of every exception this runtime raises on purpose."""


class ConfigError(TrainplaneError, ValueError):
    """A setting is invalid. The message names the setting, the bad value and the fix."""


class RendezvousError(TrainplaneError):
    """The coordinator could not be reached or the world could not be formed."""


class QuorumTimeout(RendezvousError):
    """Fewer than ``quorum`` nodes registered within the quorum timeout.

    Attributes:
        missing: node ids (stable node indices) that never registered, ascending.
        registered: how many nodes did register.
        quorum: how many were needed.
        timeout: the quorum timeout, seconds.
    """

    def __init__(self, missing: Sequence[int], registered: int, quorum: int, timeout: float) -> None:
        self.missing = tuple(missing)
        self.registered = registered
        self.quorum = quorum
        self.timeout = timeout
        ids = ", ".join(str(m) for m in self.missing) or "none"
        super().__init__(
            f"quorum not met after {timeout:g} s: {registered} node(s) registered, {quorum} needed; "
            f"missing node ranks: {ids}. Likely causes: pods not scheduled (insufficient resources, "
            f"or a gang scheduler waiting for the whole group), image pull still running or failing, "
            f"or the nodes cannot reach the coordinator address. Check `kubectl get pods` and events; "
            f"raise --quorum-timeout if nodes are merely slow to start."
        )


class TransportError(TrainplaneError):
    """An HTTP exchange with another agent failed (refused, timed out, or a non-2xx status).

    Attributes:
        status: the HTTP status, or ``None`` when no response arrived.
    """

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class Unauthorized(TransportError):
    """The peer refused the request with 401: the job token is missing or wrong."""


class JobFailed(TrainplaneError):
    """A batch job ended because a rank failed and no restarts were left.

    Attributes:
        exit_code: the failing rank's exit code (128 + N when killed by signal N).
    """

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code
