"""The one seam between an agent and its peers: exchanges out, answers back, one way to read them.

Every agent-to-agent request (registration, heartbeats, reports, probes, world pushes, calls and
cancels) goes through a :class:`PeerTransport`: one exchange at a time over a kept-alive connection
(:meth:`PeerTransport.exchange`), or many at once from one thread (:meth:`PeerTransport.batch`).
Neither raises for what the peer did: each exchange ends in an :class:`Answer`, and
:meth:`Answer.result` is the one translation of an answer into an error. The coordinator's idle
connections that notice a killed agent come from the transport too (:meth:`PeerTransport.watch`),
and a :class:`Server` answers the peers. ``transport.HttpTransport`` and ``server.AgentServer``
speak HTTP over sockets; ``testbed.transport.FakeTransport`` and ``FakeNetwork.server`` call the
peers' routes in memory, so dispatch, membership and whole agents can be unit-tested without
sockets. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Protocol, Sequence

from runtime.agent.errors import TransportError
from runtime.agent.spec.address import url
from runtime.agent.spec.agent_http import refused
from runtime.agent.world import Node


@dataclass(frozen=True)
class Exchange:
    """One request to send.

    Attributes:
        host: IP address or host name.
        port: TCP port.
        method: HTTP method.
        path: route.
        body: the JSON body, encoded, or ``None``.
    """

    host: str
    port: int
    method: str
    path: str
    body: Optional[bytes] = None

    @property
    def where(self) -> str:
        """``METHOD http://host:port/path``, for messages."""
        return f"{self.method} {url(self.host, self.port, self.path)}"


@dataclass(frozen=True)
class Answer:
    """What came back for one exchange.

    Attributes:
        index: position of the exchange in its batch (0 for a single exchange).
        status: the HTTP status, or ``None`` when no complete response arrived.
        body: the decoded JSON object (empty when there was none, or it was not an object).
        error: why no usable response arrived (empty when ``status`` is set and the body parsed).
        refused: the connection was refused, so the request certainly did not start.
        timed_out: the deadline (or timeout) passed first.
    """

    index: int
    status: Optional[int]
    body: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    refused: bool = False
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        """A 2xx status with a JSON object body."""
        return self.status is not None and 200 <= self.status < 300 and not self.error

    @property
    def membership_refused(self) -> bool:
        """The coordinator refused this node's membership message (409: the node is not, or no longer,
        in the world and must register again; see ``runtime.agent.routes.status_of``)."""
        return self.status == 409

    @property
    def problem(self) -> str:
        """What went wrong, in words (``""`` when :attr:`ok`): the connection's failure, or the status
        and the peer's ``error``."""
        if self.ok:
            return ""
        if self.status is None or self.error:
            return self.error or "no answer"
        return f"answered {self.status}: {self.body.get('error', '') or 'no reason given'}"

    def result(self, exchange: Exchange) -> dict[str, Any]:
        """The body of a successful answer; otherwise the error it means.

        Raises:
            Unauthorized: the peer answered 401 (a missing or wrong job token).
            WrongJob: the peer answered 403: it serves another job.
            TransportError: no response, a non-2xx status, or a body that is not a JSON object;
                ``status`` is ``None`` when no response arrived.
        """
        if self.ok:
            return self.body
        if self.status is None:
            raise TransportError(f"{exchange.where} failed: {self.problem}")
        raise refused(exchange.where, self.status, self.body, self.error)


class Batch(Protocol):
    """Exchanges run concurrently: :meth:`run` in one thread, :meth:`abort` from any."""

    def run(self, on_answer: Callable[[Answer], None]) -> None:
        """Send every request and call ``on_answer`` once per exchange as answers complete.

        Returns when every exchange is answered, or at the deadline (each unanswered exchange is
        answered with ``status=None, timed_out=True``), or on :meth:`abort` (nothing more is answered).
        """

    def abort(self) -> None:
        """Stop :meth:`run` at once; exchanges in flight are dropped."""


class PortWatch(Protocol):
    """Idle connections to nodes' agent ports, each reporting when its node's agent is gone
    (``rendezvous.watch.Watch`` over sockets)."""

    def follow(self, nodes: Sequence[Node]) -> None:
        """Watch exactly ``nodes`` from now on."""

    def close(self) -> None:
        """Stop watching."""


class PeerTransport(Protocol):
    """Agent-to-agent exchanges, single and batched, over kept-alive connections."""

    token: str
    """The job token every request carries."""
    job: str
    """The job id every request carries with the token."""

    @property
    def sent(self) -> int:
        """Requests sent so far."""

    def exchange(self, exchange: Exchange, timeout: float) -> Answer:
        """One exchange, waiting at most ``timeout`` seconds for the connection and each read."""

    def batch(self, exchanges: Sequence[Exchange], deadline: Optional[float] = None) -> Batch:
        """A :class:`Batch` of ``exchanges`` with a monotonic ``deadline`` (``None``: no limit), not started."""

    def watch(self, gone: Callable[[Node, str], None], retry_after: float) -> PortWatch:
        """A :class:`PortWatch` that calls ``gone`` with a node and why (refused, reset, closed by its side)
        when a watched node's agent port says its agent is gone; a node whose connection failed is tried
        again after ``retry_after`` seconds."""

    def close(self) -> None:
        """Close every kept-alive connection."""


class Server(Protocol):
    """What the agent does with the server of its routes (``server.AgentServer``, or an in-memory test's)."""

    @property
    def requests_served(self) -> int:
        """Requests served so far."""

    def start(self) -> object:
        """Serve from now on."""

    def stop(self) -> None:
        """Stop serving: the address refuses connections."""


ServerFactory = Callable[..., Server]
"""Builds a :class:`Server` from ``server.AgentServer``'s constructor arguments (``address``, ``token``,
``routes`` by position, the rest by keyword): the agent's serving seam."""
