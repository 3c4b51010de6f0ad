"""One HTTP exchange without blocking, a step at a time: connect, send, receive, over kept-alive
connections. ``multiplex.MultiplexBatch`` drives many at once (in one thread, or on the agent's event
loop) with a :class:`Stepper`. Standard library only.

The responses parsed are those of ``server.AgentServer``: a status line, headers with
``Content-Length``, and a JSON body. Nothing is ever sent twice, except with ``retry_stale`` (below).
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import json
import os
import selectors
import socket
from typing import Any, Optional, Protocol

from runtime.agent.net.http11 import parse_head, request_bytes
from runtime.agent.net.keepalive import ConnectionPool
from runtime.agent.net.peer import Answer, Exchange
from runtime.agent.spec.address import host_port


class Selector(Protocol):
    """The part of a selector a flight uses: ``selectors.BaseSelector``, or a batch's view of the event loop."""

    def register(self, fileobj: Any, events: int, data: Any = None) -> Any:
        """Watch ``fileobj``."""

    def modify(self, fileobj: Any, events: int, data: Any = None) -> Any:
        """Change what ``fileobj`` is watched for."""

    def unregister(self, fileobj: Any) -> Any:
        """Stop watching ``fileobj``."""


class Flight:
    """One exchange in progress.

    Args:
        index: its position in its batch.
        exchange: the request.
        request: the request's bytes, as sent.
    """

    def __init__(self, index: int, exchange: Exchange, request: bytes) -> None:
        self.index = index
        self.exchange = exchange
        self.request = request
        self.out = memoryview(request)
        self.inbuf = bytearray()
        self.sock: Optional[socket.socket] = None
        self.connecting = False
        self.counted = False
        self.reused = False
        """Its connection was an idle kept-alive one (it may have been closed by the peer meanwhile)."""


class Stepper:
    """Takes flights a step at a time, without blocking (one thread at a time per flight).

    Args:
        pool: connections to reuse and return.
        numeric_only: connect to IP addresses only (on the event loop, where a name lookup would block):
            a host name is answered with an error.
        retry_stale: send an exchange once more, on a new connection, when the kept-alive connection it
            was sent on ends or is reset before any byte of the answer: the mark of a peer that closed it
            while idle, which processed nothing. (An agent that read the request and then stopped without
            answering looks the same; it refuses the new connection, unless it was restarted on that
            port in between.) For single exchanges, as ``HttpTransport.exchange`` promises.
    """

    def __init__(self, pool: ConnectionPool, *, numeric_only: bool = False, retry_stale: bool = False) -> None:
        self._pool = pool
        self._flags = socket.AI_NUMERICHOST if numeric_only else 0
        self._retry_stale = retry_stale

    def request(self, exchange: Exchange) -> bytes:
        """``exchange`` as bytes on the wire, with the job's token and id."""
        return request_bytes(exchange.method, exchange.path, exchange.host, exchange.port, self._pool.token,
                             self._pool.job, exchange.body)

    def start(self, flight: Flight, selector: Selector) -> Optional[Answer]:
        """Begin ``flight`` (on an idle kept-alive connection, or a new one), its socket registered with
        ``selector``; its answer when it failed at once (``None``: under way)."""
        exchange = flight.exchange
        sock = self._pool.checkout(exchange.host, exchange.port)
        if sock is not None:
            sock.setblocking(False)  # it may have carried a blocking exchange last
            flight.sock, flight.reused = sock, True
            selector.register(sock, selectors.EVENT_WRITE, flight)
            return None
        return self._connect(flight, selector)

    def _connect(self, flight: Flight, selector: Selector) -> Optional[Answer]:
        exchange = flight.exchange
        try:
            family, kind, proto, _, address = socket.getaddrinfo(exchange.host, exchange.port,
                                                                 type=socket.SOCK_STREAM, flags=self._flags)[0]
            sock = socket.socket(family, kind, proto)
        except OSError as exc:
            return Answer(flight.index, None, error=f"cannot reach {host_port(exchange.host, exchange.port)}: {exc}")
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        code = sock.connect_ex(address)
        if code not in (0, errno.EINPROGRESS, errno.EAGAIN, errno.EWOULDBLOCK):
            sock.close()
            return self._connect_failed(flight, code)
        flight.sock, flight.connecting = sock, True
        selector.register(sock, selectors.EVENT_WRITE, flight)
        return None

    def step(self, flight: Flight, mask: int, selector: Selector) -> Optional[Answer]:
        """Take ``flight`` a step on its socket's ready events ``mask``; its answer once complete."""
        sock = flight.sock
        if sock is None:
            return Answer(flight.index, None, error="internal: no socket")
        if flight.connecting:
            code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                self.drop(flight, selector)
                return self._connect_failed(flight, code)
            flight.connecting = False
        if mask & selectors.EVENT_WRITE and flight.out:
            return self._send(flight, selector)
        if mask & selectors.EVENT_READ:
            return self._receive(flight, selector)
        return None

    def _send(self, flight: Flight, selector: Selector) -> Optional[Answer]:
        sock = flight.sock
        if sock is None:
            return None
        if not flight.counted:
            flight.counted = True
            self._pool.count_sent()
        try:
            sent = sock.send(flight.out)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError as exc:
            return self._broken(flight, selector, exc, f"sending to {self._peer(flight)} failed: {exc}")
        flight.out = flight.out[sent:]
        if not flight.out:
            selector.modify(sock, selectors.EVENT_READ, flight)
        return None

    def _receive(self, flight: Flight, selector: Selector) -> Optional[Answer]:
        sock = flight.sock
        if sock is None:
            return None
        try:
            chunk = sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError as exc:
            return self._broken(flight, selector, exc, f"receiving from {self._peer(flight)} failed: {exc}")
        if not chunk:
            return self._broken(flight, selector, None, f"{self._peer(flight)} closed the connection without answering")
        flight.inbuf += chunk
        return self._complete(flight, selector)

    def _complete(self, flight: Flight, selector: Selector) -> Optional[Answer]:
        data = flight.inbuf
        try:
            head = parse_head(data)
        except ValueError as exc:
            self.drop(flight, selector)
            return Answer(flight.index, None, error=f"{self._peer(flight)} sent {exc}")
        if head is None or len(data) < head.body_start + head.length:
            return None
        raw = bytes(data[head.body_start:head.body_start + head.length])
        status = head.status
        sock, flight.sock = flight.sock, None
        if sock is not None:
            selector.unregister(sock)
            if head.keep_alive:
                self._pool.checkin(flight.exchange.host, flight.exchange.port, sock)
            else:
                sock.close()
        return decoded(flight.index, status, raw)

    def _broken(self, flight: Flight, selector: Selector, exc: Optional[OSError], error: str) -> Optional[Answer]:
        """``flight``'s connection failed (``exc``, or ``None`` for an end of stream): sent again on a new one
        when it was stale, else answered with ``error``."""
        self.drop(flight, selector)
        if self._stale(flight, exc):
            return self._again(flight, selector)
        return Answer(flight.index, None, error=error)

    def _stale(self, flight: Flight, exc: Optional[OSError]) -> bool:
        """Whether a failure (``exc``, or ``None`` for an end of stream) is an idle kept-alive connection
        the peer had closed: nothing of the answer came, and the connection was reused."""
        return (self._retry_stale and flight.reused and not flight.inbuf
                and (exc is None or isinstance(exc, (BrokenPipeError, ConnectionResetError))))

    def _again(self, flight: Flight, selector: Selector) -> Optional[Answer]:
        """Send ``flight`` once more, whole, on a new connection."""
        flight.reused, flight.out, flight.inbuf = False, memoryview(flight.request), bytearray()
        flight.counted = False  # sent again: counted again
        return self._connect(flight, selector)

    def _connect_failed(self, flight: Flight, code: int) -> Answer:
        return Answer(flight.index, None, error=f"cannot connect to {self._peer(flight)}: {os.strerror(code)}",
                      refused=code == errno.ECONNREFUSED)

    def drop(self, flight: Flight, selector: Selector) -> None:
        """Abandon ``flight``: its connection is closed (never returned to the pool)."""
        sock, flight.sock = flight.sock, None
        if sock is None:
            return
        with contextlib.suppress(KeyError, ValueError):
            selector.unregister(sock)
        sock.close()

    @staticmethod
    def _peer(flight: Flight) -> str:
        return host_port(flight.exchange.host, flight.exchange.port)



def numeric(host: str) -> bool:
    """Whether ``host`` is an IP address (the loop connects to those; a name would need a lookup)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def decoded(index: int, status: int, raw: bytes) -> Answer:
    """The answer of a complete response: its status and its body, which must be a JSON object."""
    try:
        body = json.loads(raw) if raw else {}
    except (json.JSONDecodeError, UnicodeDecodeError):
        return Answer(index, status, error="response is not JSON")
    if not isinstance(body, dict):
        return Answer(index, status, error="response is not a JSON object")
    return Answer(index, status, body)
