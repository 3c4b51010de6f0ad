"""``HttpTransport``: the peer transport over HTTP/1.1 and sockets. Standard library only.

One connection pool per transport (idle kept-alive connections per peer): a single exchange
(:meth:`HttpTransport.exchange`) borrows a connection, a batch (``multiplex.MultiplexBatch``) many, and
both return what they borrowed, so a heartbeat every fraction of a second to the same parent costs no
TCP handshake and no server thread start. Given the agent's event loop (:meth:`HttpTransport.use_loop`),
the loop does every exchange's I/O beside the server's connections, and the thread that asked waits
for the answer; without one (or for a host name, which the loop does not look up), that thread does it.
``TCP_NODELAY`` is set on every connection. A request is never sent twice, except once on a new
connection when a kept-alive one ends before any byte of the answer, the mark of a peer that closed it
while idle (``flight.Stepper``'s ``retry_stale`` says when that can be otherwise).
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from runtime.agent.errors import StaleConnection
from runtime.agent.net.flight import decoded, numeric
from runtime.agent.net.http11 import ResponseHead, parse_head, request_bytes
from runtime.agent.net.keepalive import ConnectionPool
from runtime.agent.net.loop import EventLoop
from runtime.agent.net.multiplex import MultiplexBatch
from runtime.agent.net.peer import Answer, Exchange
from runtime.agent.rendezvous.watch import Watch
from runtime.agent.world import Node

DEFAULT_TIMEOUT = 5.0
"""Seconds a one-shot :func:`request_json` waits, by default."""


class HttpTransport:
    """Agent-to-agent HTTP (a ``peer.PeerTransport``). Thread-safe.

    Args:
        token: the job token, sent as a bearer token on every request.
        clock: monotonic clock, seconds (batch deadlines).
        job: the job id, sent with the token on every request (``contract.JOB_HEADER``): a peer of
            another job refuses it.
    """

    def __init__(self, token: str, clock: Callable[[], float] = time.monotonic, *, job: str) -> None:
        self.token = token
        self.job = job
        self._clock = clock
        self._pool = ConnectionPool(token, job)
        self._loop: Optional[EventLoop] = None

    def use_loop(self, loop: EventLoop) -> None:
        """Do every exchange's and batch's I/O on ``loop``, the agent server's, from now on (while it serves)."""
        self._loop = loop

    @property
    def sent(self) -> int:
        """Requests sent so far (counted when a request's first byte is written; a request sent again on a
        new connection counts again)."""
        return self._pool.sent

    def exchange(self, exchange: Exchange, timeout: float) -> Answer:
        """One exchange over a kept-alive connection (a new one if none is idle).

        Args:
            exchange: the request.
            timeout: seconds for connecting and for each send and receive (on the event loop: for the
                whole exchange).
        """
        loop = self._loop
        if loop is not None and loop.serving() and not loop.in_loop() and numeric(exchange.host):
            answers: list[Answer] = []
            MultiplexBatch(self._pool, [exchange], self._clock() + timeout, self._clock, home=loop,
                           retry_stale=True).run(answers.append)
            return answers[0]
        sock = self._pool.checkout(exchange.host, exchange.port)
        if sock is not None:
            try:
                return self._over(sock, exchange, timeout)
            except StaleConnection:
                pass  # the peer closed it while idle: once more, on a new connection
        try:
            sock = socket.create_connection((exchange.host, exchange.port), timeout=timeout)
        except OSError as exc:
            return _failed(exc)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            return self._over(sock, exchange, timeout)
        except StaleConnection as exc:
            return Answer(0, None, error=str(exc))

    def watch(self, gone: Callable[[Node, str], None], retry_after: float) -> Watch:
        """Idle TCP connections to agent ports (``rendezvous.watch.Watch``), watched on this transport's event
        loop once it has one (:meth:`use_loop`), else on a loop of their own."""
        return Watch(gone, retry_after, self._clock, loop=lambda: self._loop)

    def batch(self, exchanges: Sequence[Exchange], deadline: Optional[float] = None) -> MultiplexBatch:
        """A batch of ``exchanges`` sharing this transport's connections, not started."""
        return MultiplexBatch(self._pool, exchanges, deadline, self._clock, home=self._loop)

    def close(self) -> None:
        """Close every idle connection."""
        self._pool.close()

    def _over(self, sock: socket.socket, exchange: Exchange, timeout: float) -> Answer:
        """The exchange over ``sock``, which it returns to the pool or closes.

        Raises:
            StaleConnection: the peer closed the connection before answering (nothing was processed).
        """
        sock.settimeout(timeout)
        self._pool.count_sent()
        try:
            head, raw = _exchange(sock, request_bytes(exchange.method, exchange.path, exchange.host, exchange.port,
                                                      self.token, self.job, exchange.body))
        except (OSError, ValueError, StaleConnection) as exc:
            sock.close()
            if isinstance(exc, StaleConnection):
                raise
            return _failed(exc)
        if head.keep_alive:
            self._pool.checkin(exchange.host, exchange.port, sock)
        else:
            sock.close()
        return decoded(0, head.status, raw)


def _failed(exc: BaseException) -> Answer:
    """The answer of an exchange that got no response."""
    return Answer(0, None, error=str(exc) or type(exc).__name__, refused=isinstance(exc, ConnectionRefusedError),
                  timed_out=isinstance(exc, (TimeoutError, socket.timeout)))


def _exchange(sock: socket.socket, message: bytes) -> tuple[ResponseHead, bytes]:
    """Send ``message``, read one response: its head and body.

    Raises:
        StaleConnection: the peer closed the connection before any byte of the response.
        OSError: sending or receiving failed (``TimeoutError`` past the timeout).
        ValueError: the response is malformed or ends early.
    """
    try:
        sock.sendall(message)
    except (BrokenPipeError, ConnectionResetError) as exc:
        raise StaleConnection(str(exc)) from exc
    received = bytearray()
    head = None
    while True:
        try:
            chunk = sock.recv(1 << 16)
        except ConnectionResetError as exc:
            if received:
                raise
            raise StaleConnection(str(exc)) from exc
        if not chunk:
            if received:
                raise ValueError("the connection closed in the middle of the response")
            raise StaleConnection("the peer closed the connection without answering")
        received += chunk
        head = head or parse_head(received)
        if head is not None and len(received) >= head.body_start + head.length:
            return head, bytes(received[head.body_start:head.body_start + head.length])


def encode(body: Union[Mapping[str, Any], bytes, None]) -> Optional[bytes]:
    """A request body as it travels: a JSON object encoded, bytes (already encoded) or ``None`` as is.

    Raises:
        TypeError: ``body`` is none of those (a number or a list is not a request body).
    """
    if isinstance(body, bytes) or body is None:
        return body
    if not isinstance(body, Mapping):
        raise TypeError(f"a request body is a JSON object, bytes or None, not {type(body).__name__}")
    return json.dumps(body).encode()


def request_json(
    host: str,
    port: int,
    method: str,
    path: str,
    token: str,
    body: Union[Mapping[str, Any], bytes, None] = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    job: str,
) -> dict[str, Any]:
    """One JSON request to an agent on a connection of its own, for the tests' and benchmarks' harnesses
    (local mode asks with ``runtime.local.json_http``): an :class:`HttpTransport` used once.

    Args:
        host: address or host name of the agent.
        port: its TCP port.
        method: HTTP method.
        path: route.
        token: the job token, sent as a bearer token.
        body: JSON object to send, the same already encoded, or ``None``.
        timeout: socket timeout, seconds (keyword only).
        job: the job id the request is for (an agent of another job refuses it).

    Returns:
        The decoded JSON object of a 2xx response.

    Raises:
        Unauthorized: the agent answered 401.
        WrongJob: the agent answered 403: it serves another job.
        TransportError: no connection, a timeout, a non-2xx status, or a body that is not a JSON
            object. ``status`` is ``None`` when no response arrived.
    """
    transport = HttpTransport(token, job=job)
    exchange = Exchange(host, port, method, path, encode(body))
    try:
        return transport.exchange(exchange, timeout).result(exchange)
    finally:
        transport.close()
