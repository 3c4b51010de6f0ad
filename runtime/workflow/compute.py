"""``Compute``: where a job runs and how big it is, and the running job it holds once deployed.

A compute kind implements ``_start(request) -> Endpoint`` and ``_stop()``; the base class decides
when to start, reuse or replace the job (:meth:`Compute.deploy`), and refuses to deploy from inside
a job's own process (:mod:`runtime.workflow.guard`).
"""

from __future__ import annotations

import abc
import copy
from dataclasses import dataclass
from typing import Optional

from runtime.agent.errors import ConfigError
from runtime.agent.spec.job import check, default
from runtime.agent.spec.wire import JSON, SERIALIZATIONS
from runtime.workflow.guard import refuse_inside_job

READY_TIMEOUT = 120.0
"""Seconds a job may take to report ready (a local job to start; an existing job to be reachable and running)."""


@dataclass(frozen=True)
class Endpoint:
    """A running service-mode job as a caller reaches it.

    Attributes:
        url: the coordinator's base URL.
        token: the job's bearer token.
    """

    url: str
    token: str


@dataclass(frozen=True)
class DeployRequest:
    """What ``fn(...).to(compute)`` asks of a compute. The function's code is not part of it: every
    call carries the digest of the caller's source tree, which reaches the job's nodes through its
    agents (``runtime.workflow.codesync``), whatever the compute.

    Attributes:
        function: ``module:qualname`` of the function being deployed (a compute may name its job after it).
    """

    function: str = ""


def resize_limit_of(value: object) -> int:
    """A compute's ``resize_limit``: the most nodes ``.to()`` may resize its job to in place, 1 or more.

    Raises:
        ConfigError: anything else; names it.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"resize_limit={value!r} is invalid: use the most nodes the job may be resized to, 1 or "
                          "more")
    return value


class Compute(abc.ABC):
    """Where a job runs and how big it is; holds the job once deployed.

    Args:
        workers: nodes.
        num_proc: processes per node.
        distribution: which framework's environment to set (``spmd``, ``pytorch``, ``jax``, ``tensorflow``),
            or a single-controller job (``ray``, ``monarch``: calls run on node 0 only).
        serialization: ``json`` or ``pickle`` for calls (``pickle`` makes the deployment accept it).

    Raises:
        SpecError: a job setting is invalid (as the job spec checks it); names it.
        ConfigError: ``serialization`` is invalid.
    """

    def __init__(self, workers: int = default("workers"), num_proc: int = default("num_proc"),
                 distribution: str = default("distribution"), serialization: str = JSON) -> None:
        for name, value in (("workers", workers), ("num_proc", num_proc), ("distribution", distribution)):
            check(name, value)
        if serialization not in SERIALIZATIONS:
            raise ConfigError(f"serialization={serialization!r} is invalid: use one of {', '.join(SERIALIZATIONS)}")
        self.workers = workers
        self.num_proc = num_proc
        self.distribution = distribution
        self.serialization = serialization
        self._endpoint: Optional[Endpoint] = None

    def distribute(self, distribution: str, workers: Optional[int] = None, num_proc: Optional[int] = None) -> Compute:
        """A copy of this (not yet deployed) compute with a distribution and, optionally, a new size.

        Raises:
            ConfigError: a value is invalid.
            RuntimeError: this compute is already deployed.
        """
        if self.running:
            raise RuntimeError("distribute() a compute before deploying it (or teardown() first)")
        other = copy.copy(self)
        Compute.__init__(other, self.workers if workers is None else workers,
                         self.num_proc if num_proc is None else num_proc, distribution, self.serialization)
        return other

    @property
    def running(self) -> bool:
        """Whether a job is deployed."""
        return self._endpoint is not None

    @property
    def endpoint(self) -> Endpoint:
        """The running job.

        Raises:
            RuntimeError: nothing is deployed.
        """
        if self._endpoint is None:
            raise RuntimeError("this compute is not deployed: call fn(...).to(compute) first")
        return self._endpoint

    def deploy(self, request: DeployRequest = DeployRequest()) -> Endpoint:
        """Start the job, or reuse the running one (functions from any directory share it: each call
        brings its code).

        Raises:
            NestedJobError: called from inside a job's own process.
            RendezvousError: the job did not become ready.
        """
        refuse_inside_job(self.describe())
        if self._endpoint is None:
            self._endpoint = self._start(request)
        return self._endpoint

    def teardown(self) -> None:
        """Stop the job if one is running."""
        if self._endpoint is not None:
            self._endpoint = None
            self._stop()

    def continues(self, previous: Compute) -> bool:
        """Whether deploying this compute takes over ``previous``'s running job instead of replacing it.

        ``RemoteFunction.to(self)`` then adopts it (:meth:`adopt`) rather than tearing its job down,
        and this compute's deployment updates the job (a local job is resized in place; a Kubernetes
        compute updates its stack's job in place of destroying and recreating it). The default: never.
        """
        return False

    def adopt(self, previous: Compute) -> None:
        """Take over ``previous``'s running job, which this compute :meth:`continues`: ``previous``
        lets go of it (:meth:`release`), and this compute's next deploy updates it (a local job is
        resized in place, a Kubernetes job's stack is updated)."""
        previous.release()

    def release(self) -> None:
        """Let go of the running job without stopping it (another compute :meth:`continues` it)."""
        self._endpoint = None

    def describe(self) -> str:
        """This compute as a short constructor call, for messages."""
        return (f"{type(self).__name__}(workers={self.workers}, num_proc={self.num_proc}, "
                f"distribution={self.distribution!r})")

    def __enter__(self) -> Compute:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.teardown()

    @abc.abstractmethod
    def _start(self, request: DeployRequest) -> Endpoint:
        """Start (or reach) a service-mode job of this shape for ``request``."""

    @abc.abstractmethod
    def _stop(self) -> None:
        """Stop the job ``_start`` started."""
