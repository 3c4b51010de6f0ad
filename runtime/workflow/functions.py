"""``fn(func).to(compute)``: a function deployed on a compute, called on every rank.

Every positional and keyword argument of a call goes to the function. How the call runs (its
deadline, which nodes run it) is set apart, with :meth:`RemoteFunction.options`, so that no option
can take a keyword argument the function wants, and the node subset is named ``node_ranks`` (a
list of node ranks), never mistaken for a node count (``workers`` is the compute's size)::

    train = fn(train).to(compute)
    train(epochs=3)                                          # every rank, no deadline
    train.options(timeout=60)(epochs=3)                      # CallTimeout after 60 s
    train.options(node_ranks=[0])(epochs=3)                  # node 0's processes only
    train.options(output=False)(epochs=3)                    # the ranks' output stays in the job's logs
    quick = train.options(timeout=10); quick(); quick()      # options kept for many calls

While a call runs, what the ranks write to stdout and stderr appears in this process's stdout and
stderr, each line prefixed with its rank (``[rank 3] loss 0.41``), in order per rank; everything a
rank wrote before it answered is shown before the call returns or raises.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Optional, Sequence, TypeVar

from runtime.agent.errors import ConfigError
from runtime.client import CodeMissing, JobClient
from runtime.workflow.codesync import Snapshot, Source, source_for
from runtime.workflow.compute import Compute, DeployRequest, Endpoint
from runtime.workflow.locate import locate
from runtime.workflow.printer import RankPrinter

UNSET: Any = object()
"""Marks an option that :meth:`RemoteFunction.options` leaves as it was."""
FORMER_OPTIONS = {
    "timeout": "the call's deadline is a call option: use {name}.options(timeout=SECONDS)(...)",
    "workers": ("the nodes to run on are a call option: use {name}.options(node_ranks=[0, 1])(...); the number "
                "of nodes is the compute's workers"),
}
"""Keywords that used to be call options, and where they went: the hint when a function does not take them."""
_D = TypeVar("_D", bound="Deployed")


@dataclass(frozen=True)
class CallOptions:
    """How a call runs, apart from the function's own arguments.

    Attributes:
        timeout: seconds the whole call may take, > 0; ``None`` waits as long as it runs. Past it the
            call is cancelled on every rank and raises ``CallTimeout`` naming the ranks that had not
            answered.
        node_ranks: the node ranks whose processes run the call (``[0]``: node 0's processes), distinct,
            >= 0; ``None`` for every node (in a ``ray`` or ``monarch`` job: node 0, the driver).
        output: whether the ranks' stdout and stderr written during the call appear in this process's
            (rank-prefixed); ``False`` leaves them in the job's logs only.

    Raises:
        ConfigError: a value is invalid; names it and the fix.
    """

    timeout: Optional[float] = None
    node_ranks: Optional[tuple[int, ...]] = None
    output: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.output, bool):
            raise ConfigError(f"output={self.output!r} is invalid: use True (show the ranks' output here) or False")
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
        self.imported = imported_digest(self.root)

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
        """What deploying this function asks of a compute: its name."""
        return DeployRequest(self.name)


class _Connection:
    """One HTTP client to a compute's job, shared by a remote function and its :meth:`~RemoteFunction.options` views."""

    def __init__(self) -> None:
        self.client: Optional[JobClient] = None
        self.endpoint: Optional[Endpoint] = None

    def client_for(self, endpoint: Endpoint, serialization: str) -> JobClient:
        if self.client is None or self.endpoint != endpoint:
            self.close()
            self.client = JobClient(endpoint.url, endpoint.token, serialization=serialization)
            self.endpoint = endpoint
        return self.client

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = self.endpoint = None


class Deployed:
    """What :class:`RemoteFunction` and ``RemoteInstance`` share: a compute it is deployed on, call
    options, one connection to the job shared with its :meth:`options` views, moving and teardown.

    Args:
        target: what was deployed (:class:`fn` or ``cls``): its ``request`` and ``name``.
        compute: where it is deployed.
        options: how calls run (see :meth:`options`).
        connection: the connection to share (a view's), or ``None`` for a new one.
    """

    def __init__(self, target: Any, compute: Compute, options: CallOptions = CallOptions(),
                 connection: Optional[_Connection] = None) -> None:
        self.target = target
        self.compute = compute
        self.call_options = options
        self._connection = connection or _Connection()

    def options(self: _D, *, timeout: Optional[float] = UNSET, node_ranks: Optional[Sequence[int]] = UNSET,
                output: bool = UNSET) -> _D:
        """This with other call options; the options not given stay as they are.

        The result shares this deployment and connection: calling it, or this one, runs on the same job.

        Args:
            timeout: seconds the whole call may take, > 0, or ``None`` for no deadline.
            node_ranks: node ranks to run on, e.g. ``[0]``, or ``None`` for every node.
            output: whether the ranks' output during a call appears here (default ``True``).

        Raises:
            ConfigError: an option is invalid; names it.
        """
        given: tuple[tuple[str, Any], ...] = (("timeout", timeout), ("node_ranks", node_ranks), ("output", output))
        changes = {k: v for k, v in given if v is not UNSET}
        return self._view(self.compute, replace(self.call_options, **changes), self._connection)

    def to(self: _D, compute: Compute) -> _D:
        """Move to ``compute``: the previous compute's job is stopped when it is another one, unless
        ``compute`` continues it (:meth:`Compute.continues`: the same job at another size, resized in
        place; a Kubernetes job updated by its stack)."""
        if compute is not self.compute:
            self.close()
            if compute.continues(self.compute):
                compute.adopt(self.compute)
            else:
                self.compute.teardown()
        compute.deploy(self.target.request)
        moved = self._view(compute, self.call_options, None)
        moved._arrived()
        return moved

    def teardown(self) -> None:
        """Stop the job this is deployed on."""
        self.close()
        self.compute.teardown()

    def close(self) -> None:
        """Close this deployment's connections (the job keeps running)."""
        self._connection.close()

    def __enter__(self: _D) -> _D:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.teardown()

    def _code(self) -> tuple[Optional[Source], Optional[Snapshot]]:
        """The caller's source tree of what was deployed and its snapshot now (``None, None`` for an
        installed package's code, which the job imports from its own environment).

        Raises:
            ConfigError: the tree is over the cap (``runtime.workflow.codesync``).
        """
        source = source_for(self.target.root)
        return source, source.snapshot() if source is not None else None

    def _edited(self, snapshot: Optional[Snapshot]) -> bool:
        """Whether the tree in ``snapshot`` is not the one what was deployed was imported from here
        (``target.imported``), so this process's copy of its code (signatures, methods) is out of
        date and only the job can check a call against the code it runs."""
        imported = self.target.imported
        return snapshot is not None and imported is not None and snapshot.digest != imported

    def _invoke(self, name: str, args: Sequence[Any], kwargs: Mapping[str, Any],
                code: Optional[tuple[Optional[Source], Optional[Snapshot]]] = None) -> list[Any]:
        """Run ``name`` on the job with these options, importing from the caller's source tree as it is
        now, or as in ``code`` (:meth:`_code`) when given (sent first if the job lacks it; none for an
        installed package's function); one result per rank, in rank order."""
        client = self._connection.client_for(self.compute.endpoint, self.compute.serialization)
        options = self.call_options
        source, snapshot = code if code is not None else self._code()

        def invoke() -> list[Any]:
            return client.invoke(name, args, kwargs, timeout=options.timeout, node_ranks=options.node_ranks,
                                 output=RankPrinter() if options.output else None,
                                 code=snapshot.digest if snapshot is not None else None)

        try:
            return invoke()
        except CodeMissing:
            if source is None or snapshot is None:
                raise
            client.send_code(snapshot.digest, source.archive(snapshot))
            return invoke()

    def _view(self: _D, compute: Compute, options: CallOptions, connection: Optional[_Connection]) -> _D:
        """The same deployed thing on ``compute`` with ``options`` (sharing ``connection``, if given)."""
        return type(self)(self.target, compute, options, connection)

    def _arrived(self) -> None:
        """Called once after :meth:`to` deployed on a compute (e.g. to make instances there)."""


class RemoteFunction(Deployed):
    """A function deployed on a compute: calling it runs it on every rank.

    Args:
        function: what to call.
        compute: where it is deployed.
        options: how calls run (see :meth:`options`).
    """

    @property
    def function(self) -> fn:
        """What is called."""
        return self.target

    def __call__(self, *args: Any, **kwargs: Any) -> list[Any]:
        """Run ``function(*args, **kwargs)`` on every rank (or the nodes of ``node_ranks``); one result per rank.

        Every argument goes to the function; the deadline and the node subset are set with
        :meth:`options`. The arguments are checked here against this process's copy of the function
        while the source tree is as it was imported from; after an edit (a parameter added) the job,
        which runs the edited code, checks them.

        Returns:
            One result per rank, in global rank order.

        Raises:
            TypeError: the arguments do not fit the function's signature (checked here, before any
                rank runs; a ``timeout=`` or ``workers=`` the function does not take says where that
                option went). After an edit of the tree: a RemoteError from the ranks instead.
            RemoteError, CallTimeout, WorkerMembershipChanged, ...: as ``runtime.client.JobClient.call``.
            RuntimeError: the compute has been torn down.
        """
        code = self._code()
        if not self._edited(code[1]):
            check_arguments(self.function.func, self.function.name, args, kwargs)
        return self._invoke(self.function.name, args, kwargs, code)


def imported_digest(root: str) -> Optional[str]:
    """The digest of the source tree at ``root`` now, when its code is taken in by :class:`fn` or
    ``cls`` (what :meth:`Deployed._edited` compares with); ``None`` for an installed package's root or
    a tree that cannot be snapshotted (over the cap: the first call says so)."""
    source = source_for(root)
    if source is None:
        return None
    try:
        return source.snapshot().digest
    except (ConfigError, OSError):
        return None


def check_arguments(func: Callable[..., Any], name: str, args: Sequence[Any], kwargs: Mapping[str, Any],
                    bound: bool = False) -> None:
    """Refuse arguments that do not fit ``func``'s signature, before anything is sent.

    Args:
        func: the function (or, with ``bound``, a class's function whose first parameter is the instance).
        name: ``module:qualname``, for the message.
        args: positional arguments.
        kwargs: keyword arguments.
        bound: the first parameter is filled by the remote instance.

    Raises:
        TypeError: they do not fit; says how, and where a former call option (``timeout=``,
            ``workers=``) the function does not take went.
    """
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*((None,) if bound else ()), *args, **kwargs)
    except TypeError as exc:
        short = name.rsplit(":", 1)[-1].rsplit(".", 1)[-1]
        hints = [FORMER_OPTIONS[k].format(name=short) for k in kwargs
                 if k in FORMER_OPTIONS and k not in signature.parameters]
        parameters = [p.replace(annotation=p.empty) for p in signature.parameters.values()]
        plain = signature.replace(parameters=parameters[1:] if bound else parameters,
                                  return_annotation=signature.empty)
        raise TypeError(f"{name}{plain}: {exc}" + "".join(f"; {h}" for h in hints)) from None
