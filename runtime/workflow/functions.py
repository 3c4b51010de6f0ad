"""``fn(func).to(compute)``: a function deployed on a compute, called on every rank.

Every positional and keyword argument of a call goes to the function. How the call runs (its
deadline, which nodes run it) is set apart, with :meth:`RemoteFunction.options`, so that no option
can take a keyword argument the function wants, and the node subset is named ``node_ranks`` (a
list of node ranks), never mistaken for a node count (``workers`` is the compute's size)::

    train = fn(train).to(compute)
    train(epochs=3)                                          # every rank, no deadline
    train.options(timeout=60)(epochs=3)                      # CallTimeout after 60 s
    train.options(node_ranks=[0])(epochs=3)                  # node 0's processes only
    quick = train.options(timeout=10); quick(); quick()      # options kept for many calls
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional, Sequence

from runtime.agent.errors import ConfigError
from runtime.client import JobClient
from runtime.workflow.compute import Compute, DeployRequest, Endpoint
from runtime.workflow.locate import locate

UNSET: Any = object()
"""Marks an option that :meth:`RemoteFunction.options` leaves as it was."""
FORMER_OPTIONS = {
    "timeout": "the call's deadline is a call option: use {name}.options(timeout=SECONDS)(...)",
    "workers": ("the nodes to run on are a call option: use {name}.options(node_ranks=[0, 1])(...); the number "
                "of nodes is the compute's workers"),
}
"""Keywords that used to be call options, and where they went: the hint when a function does not take them."""


@dataclass(frozen=True)
class CallOptions:
    """How a call runs, apart from the function's own arguments.

    Attributes:
        timeout: seconds the whole call may take, > 0; ``None`` waits as long as it runs. Past it the
            call is cancelled on every rank and raises ``CallTimeout`` naming the ranks that had not
            answered.
        node_ranks: the node ranks whose processes run the call (``[0]``: node 0's processes), distinct,
            >= 0; ``None`` for every node (in a ``ray`` or ``monarch`` job: node 0, the driver).

    Raises:
        ConfigError: a value is invalid; names it and the fix.
    """

    timeout: Optional[float] = None
    node_ranks: Optional[tuple[int, ...]] = None

    def __post_init__(self) -> None:
        timeout = self.timeout
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                    or not math.isfinite(timeout) or timeout <= 0):
            raise ConfigError(f"timeout={timeout!r} is invalid: use seconds > 0, or None to wait as long as the "
                              "call runs")
        ranks = self.node_ranks
        if ranks is None:
            return
        if isinstance(ranks, (int, str, bytes)):
            raise ConfigError(f"node_ranks={ranks!r} is invalid: it lists the node ranks to run on, e.g. "
                              f"node_ranks=[0] or range(2), not a number of nodes (the job's size is the compute's "
                              "workers)")
        ranks = tuple(ranks)
        if not ranks or any(isinstance(r, bool) or not isinstance(r, int) or r < 0 for r in ranks) \
                or len(set(ranks)) != len(ranks):
            raise ConfigError(f"node_ranks={ranks!r} is invalid: use distinct node ranks >= 0, e.g. [0, 1], or "
                              "None for every node")
        object.__setattr__(self, "node_ranks", ranks)


class fn:  # lower case like Kubetorch's ``kt.fn``, which users know
    """A function to run remotely, located by module and qualified name.

    Args:
        func: a function defined with ``def`` at the top level of a module (or a class) in a ``.py`` file.

    Raises:
        ValueError: at once, when ``func`` cannot be imported by name in another process: a lambda,
            a closure, a bound method, a built-in, or a function typed into the REPL, ``python -``,
            ``python -c`` or a notebook; the message says why and what to do.
    """

    def __init__(self, func: Callable[..., Any]) -> None:
        self.func = func
        self.name, self.root = locate(func)

    def to(self, compute: Compute) -> RemoteFunction:
        """Deploy to ``compute`` (start its job, or reuse it) and return the remote function.

        Raises:
            NestedJobError: called from inside a job's own process (a driver without the
                ``if __name__ == "__main__":`` guard, imported by the job).
            RendezvousError, DeployError, ...: the compute's own (see its class).
        """
        compute.deploy(self.request)
        return RemoteFunction(self, compute)

    @property
    def request(self) -> DeployRequest:
        """What deploying this function asks of a compute: its import root and its name."""
        return DeployRequest((self.root,), self.name)


class _Connection:
    """One HTTP client to a compute's job, shared by a remote function and its :meth:`~RemoteFunction.options` views."""

    def __init__(self) -> None:
        self.client: Optional[JobClient] = None
        self.endpoint: Optional[Endpoint] = None

    def client_for(self, endpoint: Endpoint, serialization: str) -> JobClient:
        if self.client is None or self.endpoint != endpoint:
            self.close()
            self.client = JobClient(endpoint.url, endpoint.token, serialization)
            self.endpoint = endpoint
        return self.client

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = self.endpoint = None


class RemoteFunction:
    """A function deployed on a compute: calling it runs it on every rank.

    Args:
        function: what to call.
        compute: where it is deployed.
        options: how calls run (see :meth:`options`).
    """

    def __init__(self, function: fn, compute: Compute, options: CallOptions = CallOptions(),
                 connection: Optional[_Connection] = None) -> None:
        self.function = function
        self.compute = compute
        self.call_options = options
        self._connection = connection or _Connection()

    def __call__(self, *args: Any, **kwargs: Any) -> list[Any]:
        """Run ``function(*args, **kwargs)`` on every rank (or the nodes of ``node_ranks``); one result per rank.

        Every argument goes to the function; the deadline and the node subset are set with
        :meth:`options`.

        Returns:
            One result per rank, in global rank order.

        Raises:
            TypeError: the arguments do not fit the function's signature (checked here, before any
                rank runs; a ``timeout=`` or ``workers=`` the function does not take says where that
                option went).
            RemoteError, CallTimeout, WorkerMembershipChanged, ...: as ``runtime.client.JobClient.call``.
            RuntimeError: the compute has been torn down.
        """
        self._check_arguments(args, kwargs)
        client = self._connection.client_for(self.compute.endpoint, self.compute.serialization)
        return client.invoke(self.function.name, args, kwargs, timeout=self.call_options.timeout,
                             node_ranks=self.call_options.node_ranks)

    def options(self, *, timeout: Optional[float] = UNSET,
                node_ranks: Optional[Sequence[int]] = UNSET) -> RemoteFunction:
        """This function with other call options; the options not given stay as they are.

        The result shares this function's deployment and connection: calling it, or this one, runs
        on the same job.

        Args:
            timeout: seconds the whole call may take, > 0, or ``None`` for no deadline.
            node_ranks: node ranks to run on, e.g. ``[0]``, or ``None`` for every node.

        Raises:
            ConfigError: an option is invalid; names it.
        """
        given: tuple[tuple[str, Any], ...] = (("timeout", timeout), ("node_ranks", node_ranks))
        changes = {k: v for k, v in given if v is not UNSET}
        return RemoteFunction(self.function, self.compute, replace(self.call_options, **changes), self._connection)

    def to(self, compute: Compute) -> RemoteFunction:
        """Move to ``compute``: the previous compute's job is stopped when it is another one (resizing),
        unless ``compute`` continues it (:meth:`Compute.continues`: a Kubernetes job resized by a
        stack update)."""
        if compute is not self.compute:
            self.close()
            if compute.continues(self.compute):
                self.compute.release()
            else:
                self.compute.teardown()
        compute.deploy(self.function.request)
        return RemoteFunction(self.function, compute, self.call_options)

    def teardown(self) -> None:
        """Stop the job this function is deployed on."""
        self.close()
        self.compute.teardown()

    def close(self) -> None:
        """Close this function's connections (the job keeps running)."""
        self._connection.close()

    def __enter__(self) -> RemoteFunction:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.teardown()

    def _check_arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            signature = inspect.signature(self.function.func)
        except (TypeError, ValueError):
            return
        try:
            signature.bind(*args, **kwargs)
        except TypeError as exc:
            short = self.function.name.rsplit(":", 1)[-1].rsplit(".", 1)[-1]
            hints = [FORMER_OPTIONS[k].format(name=short) for k in kwargs
                     if k in FORMER_OPTIONS and k not in signature.parameters]
            plain = signature.replace(parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
                                      return_annotation=signature.empty)
            raise TypeError(f"{self.function.name}{plain}: {exc}" + "".join(f"; {h}" for h in hints)) from None
