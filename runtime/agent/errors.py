"""Exceptions of the in-pod runtime. Standard library only.

Tree::

    TrainplaneError
    ├── ConfigError (also ValueError)      bad settings: names the field, the value and the fix
    │   ├── SpecError                      a job setting is invalid, in parts each front end words its way
    │   └── ParseError                     text a setting's codec cannot read: what is wrong, how to write it
    ├── RendezvousError                    the world could not be formed
    │   ├── QuorumTimeout                  quorum not met in time; names the missing node ids
    │   └── MembershipRefused              the coordinator (or a tree parent) refuses a member's request:
    │       │                              the job ended, the world formed without it, it is not (or no
    │       │                              longer) in the world; the HTTP layer answers 409
    │       └── NotAMember                 the node id is none of the job's (answered 400)
    ├── TransportError                     an HTTP exchange between agents failed
    │   ├── Unauthorized                   401: missing or wrong job token
    │   ├── WrongJob                       403: the peer serves another job (``contract.JOB_HEADER``)
    │   └── StaleConnection                a kept-alive connection the peer had closed while idle: nothing
    │                                      of the request was processed, so it is sent again once
    ├── HttpError                          raised by a route handler: answer with this HTTP status
    ├── ChannelClosed (also EOFError)      the channel to a service worker process ended
    ├── CallError                          a service-mode call did not return every rank's result
    │   ├── RemoteError                    the called function raised on a rank
    │   ├── CallTimeout                    the deadline passed; names the ranks that had not answered
    │   ├── CallCancelled                  stopped because the call failed elsewhere (or was failed)
    │   ├── NodeFailed                     a node on the call's path did not answer properly
    │   └── JobEnded                       the job has ended: every call after its end raises it, with why
    ├── WorkerMembershipChanged            the world changed (delivered into user processes; fails
    │                                      in-flight service calls)
    └── StaleProcessGroup                  a service call found torch's default process group formed
                                           for an older world: it fails naming the change

    CallInterrupt (BaseException)          raised inside a service worker process to stop the running
                                           call; a BaseException so that ``except Exception`` in user
                                           code does not swallow it (as KeyboardInterrupt)

Every exception with more than a message rebuilds itself from its attributes (``__reduce__``), so it
pickles, and ``runtime.agent.spec.wire`` turns it into the JSON an HTTP hop carries and back.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence


class TrainplaneError(Exception):
    """Root of every exception this runtime raises on purpose."""


class ConfigError(TrainplaneError, ValueError):
    """A setting is invalid. The message names the setting, the bad value and the fix."""


class ParseError(ConfigError):
    """Text a setting's codec (``runtime.agent.spec.setting.Codec``) cannot read, in the two parts of
    a ``(problem, fix)`` check; the message is ``problem; fix`` and each front end puts the setting's
    name and the text before it.

    Attributes:
        problem: what is wrong with the text, e.g. ``must be a whole number``.
        fix: how to write it, e.g. ``write it in digits, e.g. 4``.
    """

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"{problem}; {fix}")
        self.problem = problem
        self.fix = fix

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.problem, self.fix)


class SpecError(ConfigError):
    """A job setting is invalid (``runtime.agent.spec.job``), in parts a front end can say in its own
    terms: each names settings as ``{name}`` in ``problem`` and ``fix``, which :meth:`render` fills
    in with the front end's names for them (a flag as typed, an environment variable, a field).

    Attributes:
        field: the setting's name (a ``JobSpec`` field).
        value: the bad value.
        problem: what is wrong with it, e.g. ``must be from 1 to {workers} (2)``.
        fix: how to put it right, e.g. ``use 1 or more nodes``.
        subject: the settings the problem is about, e.g. ``{min_workers}/{max_workers}``; ``{field}``
            by default.
        shows_value: whether a front end that names the setting before the problem (:meth:`line`) adds
            the value to it (the problem may say the value itself, or be about another setting's).
    """

    def __init__(self, field: str, value: object, problem: str, fix: str, subject: str = "",
                 shows_value: bool = True) -> None:
        self.field = field
        self.value = list(value) if isinstance(value, tuple) else value
        self.problem = problem
        self.fix = fix
        self.subject = subject or f"{{{field}}}"
        self.shows_value = shows_value
        rendered_problem, rendered_fix = self.render(lambda name: name)
        super().__init__(f"{field}={self.value!r} is invalid: {rendered_problem}; {rendered_fix}")

    def render(self, name_of: Callable[[str], str]) -> tuple[str, str]:
        """``(problem, fix)`` with every ``{name}`` replaced by ``name_of(name)``."""
        names = _Names(name_of)
        return self.problem.format_map(names), self.fix.format_map(names)

    def line(self, name_of: Callable[[str], str]) -> str:
        """``subject: problem (got value); fix``, names by ``name_of``, the value (its ``repr``, as the
        agent's refusals show it) only when :attr:`shows_value`: the one line of a front end that names
        the setting before the problem, e.g. a command line's
        ``--nnodes: must be 1 or more (got 0); use 1 or more nodes``."""
        problem, fix = self.render(name_of)
        got = f" (got {self.value!r})" if self.shows_value else ""
        return f"{self.subject.format_map(_Names(name_of))}: {problem}{got}; {fix}"

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.field, self.value, self.problem, self.fix, self.subject, self.shows_value)


class _Names(dict):
    """``str.format_map`` mapping that names any setting through a function."""

    def __init__(self, name_of: Callable[[str], str]) -> None:
        super().__init__()
        self._name_of = name_of

    def __missing__(self, key: str) -> str:
        return self._name_of(key)


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


class MembershipRefused(RendezvousError):
    """The coordinator (or a node's tree parent) refuses a member's request: the job has ended, the
    world formed without the node, or the node is not (or no longer) in the world and should register
    again. A membership decision, not a transport one: the HTTP layer answers it with 409."""


class NotAMember(MembershipRefused):
    """A node id outside the job's range asked to join (the HTTP layer answers 400)."""


class RendezvousClosed(MembershipRefused):
    """A node asked to join an elastic world whose ranks have begun to finish (the HTTP layer answers 410):
    the job ends without it, and the node exits 0. torch elastic closes its rendezvous the same way: pytorch/elastic's
    ``torchelastic/rendezvous/api.py`` (``RendezvousClosedException``: "used to signal completion to nodes that arrive
    late"), ``RendezvousClosedError`` in torch 2.13's ``torch/distributed/elastic/rendezvous/api.py``."""


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


class WrongJob(TransportError):
    """The peer refused the request with 403: it serves another job than the one the request names
    (``contract.JOB_HEADER``), so the two jobs' messages are never merged."""


class StaleConnection(TransportError):
    """The peer closed a kept-alive connection before any byte of the response: it had closed it
    while idle, so nothing of the request was processed and it can be sent again on a new one."""


class HttpError(TrainplaneError):
    """Raised by a route handler to answer with ``status`` and ``{"error": message}``.

    Attributes:
        status: the HTTP status to answer with.
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ChannelClosed(TrainplaneError, EOFError):
    """The other end of a service worker's channel closed it (or the stream is corrupt and was closed)."""


class CallError(TrainplaneError):
    """A service-mode call did not return every rank's result."""


class RemoteError(CallError):
    """The called function raised on a rank.

    Attributes:
        rank: global rank of the process that raised.
        node_rank: its node's rank.
        exc_type: the exception's type name, qualified with its module unless built in.
        message: ``str()`` of the exception.
        remote_traceback: the formatted traceback from the worker process.
        fn: the callable, ``module:qualname``.
    """

    def __init__(
        self, rank: int, node_rank: int, exc_type: str, message: str, remote_traceback: str = "", fn: str = ""
    ) -> None:
        self.rank = rank
        self.node_rank = node_rank
        self.exc_type = exc_type
        self.message = message
        self.remote_traceback = remote_traceback
        self.fn = fn
        head = f"{fn or 'the call'} raised {exc_type} on rank {rank} (node rank {node_rank}): {message}"
        tail = f"\n\nremote traceback (rank {rank}):\n{remote_traceback}" if remote_traceback else ""
        super().__init__(head + tail)

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.rank, self.node_rank, self.exc_type, self.message, self.remote_traceback, self.fn)


class CallTimeout(CallError):
    """The call's deadline passed before every rank answered.

    Attributes:
        timeout: the call's timeout, seconds (``None`` when the client gave up without one).
        pending_ranks: global ranks that had not answered, ascending; empty when unknown (the
            coordinator itself did not answer).
        fn: the callable, ``module:qualname``.
    """

    def __init__(self, timeout: Optional[float], pending_ranks: Sequence[int], fn: str = "", detail: str = "") -> None:
        self.timeout = timeout
        self.pending_ranks = tuple(sorted(pending_ranks))
        self.fn = fn
        self.detail = detail
        within = f" within {timeout:g} s" if timeout is not None else ""
        ranks = ", ".join(str(r) for r in self.pending_ranks)
        who = f"rank(s) {ranks} had not answered" if ranks else "no answer from the coordinator"
        super().__init__(f"{fn or 'the call'} did not finish{within}: {who}" + (f" ({detail})" if detail else ""))

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.timeout, self.pending_ranks, self.fn, self.detail)


class CallCancelled(CallError):
    """The call was stopped on this node: it failed elsewhere, or it was failed from outside."""


class NodeFailed(CallError):
    """A node on the call's path did not answer properly: refused, reset, or a bad HTTP status.

    Attributes:
        node_rank: the node that failed.
        address: its ``host:port``.
        reason: what went wrong.
        status: the HTTP status it answered with, or ``None`` when no response arrived.
    """

    def __init__(self, node_rank: int, address: str, reason: str, status: Optional[int] = None) -> None:
        self.node_rank = node_rank
        self.address = address
        self.reason = reason
        self.status = status
        super().__init__(f"node rank {node_rank} at {address} failed during the call: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.node_rank, self.address, self.reason, self.status)


class JobEnded(CallError):
    """The job has ended (its verdict is in): every call after that raises this, carrying why.

    Attributes:
        status: the job's terminal status: ``failed``, ``stopped`` or ``succeeded``.
        reason: why it ended: the root cause of a failure (the failing rank or the lost node), or
            what stopped it.
        exit_code: the job's exit code.
    """

    def __init__(self, status: str, reason: str, exit_code: int = 0) -> None:
        self.status = status
        self.reason = reason
        self.exit_code = exit_code
        super().__init__(f"the job has ended ({status}, exit code {exit_code}): {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.status, self.reason, self.exit_code)


class WorkerMembershipChanged(TrainplaneError):
    """The job's membership changed: a new world generation with nodes added and/or removed.

    Delivered into each user process (with the new world already in ``os.environ``; raised in its
    main thread, or returned by ``runtime.membership.poll``/``wait``) and raised by in-flight service
    calls at the client. Addresses are node addresses in node-rank order.

    Attributes:
        added_ips: addresses that joined.
        removed_ips: addresses that left.
        previous_ips: the previous world's addresses.
        current_ips: the new world's addresses.
        generation: the new world's generation.
    """

    def __init__(
        self,
        added_ips: Sequence[str],
        removed_ips: Sequence[str],
        previous_ips: Sequence[str],
        current_ips: Sequence[str],
        generation: int = 0,
    ) -> None:
        self.added_ips = tuple(added_ips)
        self.removed_ips = tuple(removed_ips)
        self.previous_ips = tuple(previous_ips)
        self.current_ips = tuple(current_ips)
        self.generation = generation
        super().__init__(
            f"membership changed at generation {generation}: added {list(self.added_ips)}, "
            f"removed {list(self.removed_ips)}; now {len(self.current_ips)} node(s)"
        )

    @classmethod
    def between(
        cls, previous_ips: Sequence[str], current_ips: Sequence[str], generation: int
    ) -> WorkerMembershipChanged:
        """The change from one ordered address list to another."""
        before, after = set(previous_ips), set(current_ips)
        return cls(
            [ip for ip in current_ips if ip not in before], [ip for ip in previous_ips if ip not in after],
            previous_ips, current_ips, generation,
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.added_ips, self.removed_ips, self.previous_ips, self.current_ips, self.generation)


class StaleProcessGroup(TrainplaneError):
    """A service call found torch's default process group formed (by the user's code) for an older
    world generation than the process's: running on it would wait in a collective for ranks that
    now form another world, so the call fails on this rank, naming the change and the fix.

    Attributes:
        formed: the generation the group was formed for.
        change: the membership change since (the newest one applied).
    """

    def __init__(self, formed: int, change: WorkerMembershipChanged) -> None:
        self.formed = formed
        self.change = change
        super().__init__(
            f"torch's default process group was formed for world generation {formed}, and the world has "
            f"changed since ({change}): form it again in this call (runtime.distributed.process_group() "
            "re-forms it for each new generation and keeps it across edits)"
        )

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        return (type(self), (self.formed, self.change))


class CallInterrupt(BaseException):
    """Raised in a service worker's main thread to stop the call it is running (cancellation)."""
