"""``ExistingCompute``: attach to a service-mode job that is already running; never start or stop it."""

from __future__ import annotations

from typing import Optional

from runtime.agent.errors import ConfigError
from runtime.agent.spec.wire import JSON
from runtime.workflow.attach import wait_until_serving
from runtime.workflow.compute import READY_TIMEOUT, Compute, DeployRequest, Endpoint


class ExistingCompute(Compute):
    """A service-mode job that is already running, e.g. a stack's job: attach to it, never start or stop it.

    The job belongs to whoever deployed it (``pulumi up`` for a stack's job, ``python -m runtime
    launch --mode service`` locally): deploying attaches after checking that the coordinator answers
    and its world is running, and :meth:`teardown` only disconnects; the job and its processes' state
    stay. Its size and distribution are the deployment's: ``workers``, ``num_proc`` and
    ``distribution`` are read from the job when attaching (``GET /members`` and ``GET /info``) and
    are 1, 1 and ``spmd`` until then; :meth:`distribute` refuses to change them.

    The called function's code comes from the caller, as for every compute: each call names the
    caller's source tree by digest and the job's agents receive it when they lack it, so the job
    runs the caller's current code with no image rebuild (``runtime.workflow.codesync``).

    Args:
        url: the coordinator's base URL, ``http://HOST:PORT``; for a stack's job, a port-forward to
            its node 0 (pod ``<job>-0``, agent port 32300), e.g. ``http://127.0.0.1:32300``.
        token: the job's bearer token (a stack's ``tokens`` output, by job name).
        serialization: see :class:`~runtime.workflow.compute.Compute` (``pickle`` only if the job allows it).
        ready_timeout: seconds to wait for the job to be reachable and running, >= 0 (covers a
            port-forward that is still starting and a world that is still forming).

    Raises:
        ConfigError: ``url``, ``serialization`` or ``ready_timeout`` is invalid; names it.
    """

    def __init__(self, url: str, token: str, serialization: str = JSON, *,
                 ready_timeout: float = READY_TIMEOUT) -> None:
        super().__init__(serialization=serialization)
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"url={url!r} is invalid: use the coordinator's base URL, e.g. http://127.0.0.1:32300")
        if ready_timeout < 0:
            raise ConfigError(f"ready_timeout={ready_timeout!r} is invalid: use 0 or more seconds")
        self.url = url.rstrip("/")
        self.token = token
        self.ready_timeout = ready_timeout

    def distribute(self, distribution: str, workers: Optional[int] = None, num_proc: Optional[int] = None) -> Compute:
        """Refused: an existing job's distribution and size are set where it is deployed.

        Raises:
            ConfigError: always; names the job's settings to change instead.
        """
        raise ConfigError(f"distribute({distribution!r}) is invalid for the existing job at {self.url}: its "
                          "distribution and size are its deployment's; change the job's distribution, workers "
                          "and numProc in the stack (or the launch command) instead")

    def describe(self) -> str:
        """This compute as a short constructor call, for messages."""
        return f"ExistingCompute({self.url!r})"

    def _start(self, request: DeployRequest) -> Endpoint:
        """Wait until the job at ``url`` is a running service-mode world; read its shape.

        Raises:
            Unauthorized: the token is wrong (at once, no retry).
            ConfigError: the URL reaches a batch-mode job, or an agent that is not the coordinator.
            RendezvousError: the job ended, or was not reachable and running within ``ready_timeout``;
                names the URL and the last problem.
        """
        shape = wait_until_serving(self.url, self.token, self.serialization, self.ready_timeout)
        self.workers, self.num_proc, self.distribution = shape.workers, shape.num_proc, shape.distribution
        return Endpoint(self.url, self.token)

    def _stop(self) -> None:
        """Nothing to stop: the job belongs to its deployment. Detaching is all teardown does."""
