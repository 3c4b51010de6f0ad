"""Workflow API in Kubetorch's style: send a function to a compute target, call it on every rank.

::

    compute = LocalCompute(workers=4, num_proc=2).distribute("pytorch")
    train = fn(train).to(compute)          # starts the job, or reuses it
    results = train(epochs=3)              # one result per rank, in rank order
    train.teardown()                       # or: with fn(train).to(compute) as train: ...

Three parts, kept apart as in the rest of the runtime: :class:`Compute` is *where and how big* (a
spec that can also hold its running job), :class:`Endpoint` is *the running job* as a caller sees it
(URL and token), and :class:`RemoteFunction` is *what to call* there through ``runtime.client``.

The seam for other targets is :class:`Compute`: a target implements ``_start(pythonpath) -> Endpoint``
and ``_stop()``. :class:`LocalCompute` starts local agent processes (``runtime.local``).
:class:`ExistingCompute` attaches to a service-mode job that is already running, such as a stack's
job reached through ``kubectl port-forward``; it neither starts nor stops it::

    compute = ExistingCompute("http://127.0.0.1:32300", token)
    with fn(train).to(compute) as train:   # checks the job is running; leaving only disconnects
        results = train(epochs=3)

A Kubernetes target that creates its own job would create a ``DistributedJob`` in service mode
(StatefulSet) and return the coordinator's Service address and the job token from its Secret,
shipping the function's code with the runtime bundle instead of setting PYTHONPATH.

The called function must be importable by the worker processes: defined at module level (not a
lambda or a closure), in a module whose root directory ``fn`` puts on the workers' PYTHONPATH (a
job that is already running keeps its own PYTHONPATH: see :class:`ExistingCompute`). A function
defined in the driver script itself is imported from that script's file by its stem, so the script
must keep its driver code under ``if __name__ == "__main__":``.
"""

from __future__ import annotations

import abc
import copy
import inspect
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple, Optional, Sequence

from runtime import local
from runtime.agent import contract
from runtime.agent.errors import ConfigError, RendezvousError, TransportError, Unauthorized
from runtime.agent.wire import JSON, PICKLE, SERIALIZATIONS
from runtime.agent.world import DISTRIBUTIONS, RUNNING, TERMINAL
from runtime.client import JobClient

READY_TIMEOUT = 120.0
"""Seconds a job may take to report ready (a local job to start; an existing job to be reachable and running)."""
READY_POLL_INTERVAL = 0.5
"""Seconds between an :class:`ExistingCompute`'s checks of its job."""


@dataclass(frozen=True)
class Endpoint:
    """A running service-mode job as a caller reaches it.

    Attributes:
        url: the coordinator's base URL.
        token: the job's bearer token.
    """

    url: str
    token: str


class Compute(abc.ABC):
    """Where a job runs and how big it is; holds the job once deployed.

    Args:
        workers: nodes.
        num_proc: processes per node.
        distribution: which framework's environment to set (``spmd``, ``pytorch``, ``jax``, ``tensorflow``),
            or a single-controller job (``ray``, ``monarch``: calls run on node 0 only).
        serialization: ``json`` or ``pickle`` for calls (``pickle`` makes the deployment accept it).

    Raises:
        ConfigError: a value is invalid; names it.
    """

    def __init__(self, workers: int = 1, num_proc: int = 1, distribution: str = "spmd",
                 serialization: str = JSON) -> None:
        for name, value, ok, fix in (
            ("workers", workers, workers >= 1, "use 1 or more nodes"),
            ("num_proc", num_proc, num_proc >= 1, "use 1 or more processes per node"),
            ("distribution", distribution, distribution in DISTRIBUTIONS, f"use one of {', '.join(DISTRIBUTIONS)}"),
            ("serialization", serialization, serialization in SERIALIZATIONS,
             f"use one of {', '.join(SERIALIZATIONS)}"),
        ):
            if not ok:
                raise ConfigError(f"{name}={value!r} is invalid: {fix}")
        self.workers = workers
        self.num_proc = num_proc
        self.distribution = distribution
        self.serialization = serialization
        self._endpoint: Optional[Endpoint] = None
        self._pythonpath: tuple[str, ...] = ()

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

    def deploy(self, pythonpath: Sequence[str] = ()) -> Endpoint:
        """Start the job, or reuse the running one if it already has every directory in ``pythonpath``.

        A running job missing a directory is restarted with it (its processes' state is lost).

        Raises:
            RendezvousError: the job did not become ready.
        """
        if self._endpoint is not None and set(pythonpath) <= set(self._pythonpath):
            return self._endpoint
        needed = tuple(dict.fromkeys((*self._pythonpath, *pythonpath)))
        self.teardown()
        self._endpoint = self._start(needed)
        self._pythonpath = needed
        return self._endpoint

    def teardown(self) -> None:
        """Stop the job if one is running."""
        if self._endpoint is not None:
            self._endpoint = None
            self._stop()

    def __enter__(self) -> Compute:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.teardown()

    @abc.abstractmethod
    def _start(self, pythonpath: tuple[str, ...]) -> Endpoint:
        """Start a service-mode job of this shape whose processes can import from ``pythonpath``."""

    @abc.abstractmethod
    def _stop(self) -> None:
        """Stop the job ``_start`` started."""


class LocalCompute(Compute):
    """Agents and processes on this machine (``runtime.local``), one loopback address per node.

    Args:
        workers: nodes.
        num_proc: processes per node.
        distribution: see :class:`Compute`.
        serialization: see :class:`Compute`.
        env: further environment variables for every agent and process.
        log_dir: directory for per-rank logs (default: a temporary directory per job).
        grace_period: seconds a cancelled call gets before its process is replaced; also the
            SIGTERM-to-SIGKILL grace at teardown.
        tree_threshold: calls to this many nodes or more travel a tree.
        tree_fanout: children per node in a tree.
        ready_timeout: seconds the job may take to start.
    """

    def __init__(self, workers: int = 1, num_proc: int = 1, distribution: str = "spmd", serialization: str = JSON,
                 *, env: Optional[Mapping[str, str]] = None, log_dir: Optional[str] = None, grace_period: float = 5.0,
                 tree_threshold: int = contract.DEFAULT_TREE_THRESHOLD, tree_fanout: int = contract.DEFAULT_TREE_FANOUT,
                 ready_timeout: float = READY_TIMEOUT) -> None:
        super().__init__(workers, num_proc, distribution, serialization)
        self.env = dict(env or {})
        self.log_dir = log_dir
        self.grace_period = grace_period
        self.tree_threshold = tree_threshold
        self.tree_fanout = tree_fanout
        self.ready_timeout = ready_timeout
        self.job: Optional[local.LocalJob] = None

    def _start(self, pythonpath: tuple[str, ...]) -> Endpoint:
        env = {**self.env, contract.TREE_THRESHOLD: str(self.tree_threshold),
               contract.TREE_FANOUT: str(self.tree_fanout),
               contract.ALLOW_PICKLE: "true" if self.serialization == PICKLE else "false"}
        spec = local.LocalJobSpec(workers=self.workers, num_proc=self.num_proc, mode="service",
                                  distribution=self.distribution, master_port=0, log_dir=self.log_dir,
                                  grace_period=self.grace_period, pythonpath=pythonpath, env=env)
        job = local.start(spec)
        try:
            job.wait_ready(self.ready_timeout)
        except RendezvousError:
            job.stop()
            raise
        self.job = job
        return Endpoint(job.url, job.token)

    def _stop(self) -> None:
        if self.job is not None:
            self.job.stop(timeout=self.grace_period + 10.0)
            self.job = None


class ExistingCompute(Compute):
    """A service-mode job that is already running, e.g. a stack's job: attach to it, never start or stop it.

    The job belongs to whoever deployed it (``pulumi up`` for a stack's job, ``python -m runtime
    launch --mode service`` locally): deploying attaches after checking that the coordinator answers
    and its world is running, and :meth:`teardown` only disconnects; the job and its processes' state
    stay. Its size and distribution are the deployment's: ``workers``, ``num_proc`` and
    ``distribution`` are read from the job when attaching (``GET /members`` and ``GET /info``) and
    are 1, 1 and ``spmd`` until then; :meth:`distribute` refuses to change them.

    The job's PYTHONPATH is the deployment's too, so ``fn`` cannot add the function's directory to
    it: the function's module must already be importable in the job's processes. For a stack's job,
    put its directory in the image and on the job's ``pythonpath`` (``stacks/Pulumi.local.yaml``:
    ``pythonpath: [/app/examples]`` makes ``examples/digits_service_fns.py`` importable as
    ``digits_service_fns``); locally, ``PYTHONPATH=DIR python -m runtime launch --mode service``.

    Args:
        url: the coordinator's base URL, ``http://HOST:PORT``; for a stack's job, a port-forward to
            its node 0 (pod ``<job>-0``, agent port 32300), e.g. ``http://127.0.0.1:32300``.
        token: the job's bearer token (a stack's ``tokens`` output, by job name).
        serialization: see :class:`Compute` (``pickle`` only if the job allows it).
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

    def _start(self, pythonpath: tuple[str, ...]) -> Endpoint:
        """Wait until the job at ``url`` is a running service-mode world; read its shape.

        ``pythonpath`` is not applied: the job's processes import from their own PYTHONPATH.

        Raises:
            Unauthorized: the token is wrong (at once, no retry).
            ConfigError: the URL reaches a batch-mode job, or an agent that is not the coordinator.
            RendezvousError: the job ended, or was not reachable and running within ``ready_timeout``;
                names the URL and the last problem.
        """
        deadline = time.monotonic() + self.ready_timeout
        with JobClient(self.url, self.token, self.serialization) as client:
            while True:
                try:
                    info = client.info()
                except Unauthorized:
                    raise
                except TransportError as exc:
                    problem = f"not reachable: {exc}"
                else:
                    if info.mode != "service":
                        raise ConfigError(f"{self.url} is a {info.mode}-mode job, which takes no calls: "
                                          "attach to a job deployed with mode: service")
                    if info.raw.get("coordinator") is False:
                        raise ConfigError(f"{self.url} is node {info.node_id} of job {info.job}, not its "
                                          "coordinator: connect to node 0 (pod <job>-0)")
                    if info.status == RUNNING:
                        break
                    if info.status in TERMINAL:
                        raise RendezvousError(f"the job at {self.url} has ended (status {info.status!r}): "
                                              "redeploy it (e.g. pulumi up) before attaching")
                    problem = f"status {info.status!r}"
                if time.monotonic() >= deadline:
                    raise RendezvousError(
                        f"no running service-mode job at {self.url} within {self.ready_timeout:g} s ({problem}): "
                        "check the URL (for a stack's job, the port-forward to pod <job>-0 on the agent port) "
                        "and that the job's pods are running; raise ready_timeout if it is still starting")
                time.sleep(READY_POLL_INTERVAL)
            members = client.members()
        self.workers = sum(1 for m in members.raw.get("members", []) if m.get("node_rank") is not None)
        self.num_proc = info.num_proc
        self.distribution = str(info.raw.get("distribution", self.distribution))
        return Endpoint(self.url, self.token)

    def _stop(self) -> None:
        """Nothing to stop: the job belongs to its deployment. Detaching is all teardown does."""


class fn:  # lower case like Kubetorch's ``kt.fn``, which users know
    """A function to run remotely, located by module and qualified name.

    Args:
        func: a module-level function (not a lambda or a closure).

    Raises:
        ValueError: ``func`` cannot be imported by name in another process.
    """

    def __init__(self, func: Callable[..., Any]) -> None:
        self.func = func
        self.name, self.root = locate(func)

    def to(self, compute: Compute) -> RemoteFunction:
        """Deploy to ``compute`` (start its job, or reuse it) and return the remote function."""
        compute.deploy((self.root,))
        return RemoteFunction(self, compute)


class RemoteFunction:
    """A function deployed on a compute: calling it runs it on every rank.

    Args:
        function: what to call.
        compute: where it is deployed.
    """

    def __init__(self, function: fn, compute: Compute) -> None:
        self.function = function
        self.compute = compute
        self._client: Optional[JobClient] = None
        self._client_for: Optional[Endpoint] = None

    def __call__(self, *args: Any, timeout: Optional[float] = None, workers: Optional[Sequence[int]] = None,
                 **kwargs: Any) -> list[Any]:
        """Run the function on every rank (or the nodes in ``workers``); one result per rank, in rank order.

        Raises:
            RemoteError, CallTimeout, WorkerMembershipChanged, ...: as ``runtime.client.JobClient.call``.
            RuntimeError: the compute has been torn down.
        """
        return self._client_now().invoke(self.function.name, args, kwargs, timeout=timeout, workers=workers)

    def to(self, compute: Compute) -> RemoteFunction:
        """Move to ``compute``: the previous compute's job is stopped when it is another one (resizing)."""
        if compute is not self.compute:
            self.close()
            self.compute.teardown()
        return self.function.to(compute)

    def teardown(self) -> None:
        """Stop the job this function is deployed on."""
        self.close()
        self.compute.teardown()

    def close(self) -> None:
        """Close this function's connections (the job keeps running)."""
        if self._client is not None:
            self._client.close()
            self._client = self._client_for = None

    def __enter__(self) -> RemoteFunction:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.teardown()

    def _client_now(self) -> JobClient:
        endpoint = self.compute.endpoint
        if self._client is None or self._client_for != endpoint:
            self.close()
            self._client = JobClient(endpoint.url, endpoint.token, self.compute.serialization)
            self._client_for = endpoint
        return self._client


class Location(NamedTuple):
    """How worker processes import a function.

    Attributes:
        name: ``module:qualname``, as ``runtime.client.JobClient.call`` takes it.
        root: the directory to put on the processes' PYTHONPATH so that ``module`` imports.
    """

    name: str
    root: str


def locate(func: Callable[..., Any]) -> Location:
    """Where worker processes import ``func`` from: its ``module:qualname`` and the directory to import from.

    Raises:
        ValueError: ``func`` is a lambda, a closure, or has no source file.
    """
    qualname = getattr(func, "__qualname__", "")
    if not qualname or "<" in qualname:
        raise ValueError(f"{func!r} cannot be imported by name in another process: define it at module level")
    try:
        path = Path(inspect.getfile(func)).resolve()
    except TypeError:
        raise ValueError(f"{func!r} has no source file; define it in a module") from None
    module = func.__module__
    if module == "__main__":
        return Location(f"{path.stem}:{qualname}", str(path.parent))
    root = path.parent.parent if path.name == "__init__.py" else path.parent
    for _ in range(module.count(".")):
        root = root.parent
    return Location(f"{module}:{qualname}", str(root))
