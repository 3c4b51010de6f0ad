"""Many HTTP exchanges at once from one thread, over kept-alive connections. Standard library only.

Fan-out sends one request per child and must notice the first failure at once, in whatever order the
answers come. A thread per child costs a thread start and GIL hand-offs per request and a bounded
pool of them stalls long calls behind each other; instead one thread drives every exchange of a
batch with ``selectors`` (non-blocking connect, send, receive), as an event loop would. Connections
are kept alive between calls (HTTP/1.1, which the agent's server speaks), so a call costs no TCP
handshake, and ``TCP_NODELAY`` is set so small requests are not held back by Nagle's algorithm. An
idle connection is checked before reuse (readable while idle means its server closed it), as urllib3
does. Nothing is ever sent twice: a failed exchange is reported, not retried. A batch runs either in
a thread of its own (:meth:`MultiplexBatch.run`) or on the agent's event loop
(:meth:`MultiplexBatch.start`, ``loop.EventLoop``), beside the server's connections.

The responses parsed are those of ``server.AgentServer``: a status line, headers with
``Content-Length``, and a JSON body. ``transport.HttpTransport`` runs its batches with this.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import selectors
import socket
import time
from typing import Any, Callable, Optional, Protocol, Sequence

from runtime.agent.net.http11 import parse_head, request_bytes
from runtime.agent.net.keepalive import ConnectionPool
from runtime.agent.net.loop import EventLoop, Timer
from runtime.agent.net.peer import Answer, Exchange
from runtime.agent.spec.address import host_port


class _Watch(Protocol):
    """The part of a selector a batch uses: ``selectors.BaseSelector``, or :class:`_OnLoop`."""

    def register(self, fileobj: Any, events: int, data: Any = None) -> Any:
        """Watch ``fileobj``."""

    def modify(self, fileobj: Any, events: int, data: Any = None) -> Any:
        """Change what ``fileobj`` is watched for."""

    def unregister(self, fileobj: Any) -> Any:
        """Stop watching ``fileobj``."""


class _OnLoop:
    """A batch's flights watched by an ``EventLoop``: each ready socket steps its flight."""

    def __init__(self, loop: EventLoop, step: Callable[[_Flight, int], None]) -> None:
        self._loop = loop
        self._step = step

    def register(self, fileobj: Any, events: int, data: Any = None) -> None:
        self._loop.register(fileobj, events, lambda mask: self._step(data, mask))

    def modify(self, fileobj: Any, events: int, data: Any = None) -> None:
        self._loop.modify(fileobj, events, lambda mask: self._step(data, mask))

    def unregister(self, fileobj: Any) -> None:
        self._loop.unregister(fileobj)


class _Flight:
    """One exchange in progress."""

    def __init__(self, index: int, exchange: Exchange, request: bytes) -> None:
        self.index = index
        self.exchange = exchange
        self.out = memoryview(request)
        self.inbuf = bytearray()
        self.sock: Optional[socket.socket] = None
        self.connecting = False
        self.counted = False


class MultiplexBatch:
    """A set of exchanges run concurrently by :meth:`run` in one thread; :meth:`abort` from any thread
    (a ``peer.Batch``).

    Args:
        pool: connections to reuse and return.
        exchanges: the requests.
        deadline: monotonic time by which answers must have arrived, or ``None`` for no limit.
        clock: monotonic clock, seconds.
    """

    def __init__(
        self,
        pool: ConnectionPool,
        exchanges: Sequence[Exchange],
        deadline: Optional[float] = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pool = pool
        self._exchanges = list(exchanges)
        self._deadline = deadline
        self._clock = clock
        self._wake_r, self._wake_w = socket.socketpair()
        self._aborted = False
        self._loop: Optional[EventLoop] = None
        self._on_loop: Optional[_OnLoop] = None
        self._flights: dict[int, _Flight] = {}
        self._timer: Optional[Timer] = None
        self._on_answer: Callable[[Answer], None] = lambda _answer: None

    def abort(self) -> None:
        """Stop :meth:`run` at once; exchanges in flight are dropped (their connections closed). A batch
        :meth:`start` ed on a loop is aborted on the loop (at once when called there)."""
        self._aborted = True
        if self._loop is not None:
            if self._loop.in_loop():
                self._drop_all()
            else:
                self._loop.call_soon(self._drop_all)
            return
        try:
            self._wake_w.send(b"x")
        except OSError:
            return

    def start(self, loop: EventLoop, on_answer: Callable[[Answer], None]) -> None:
        """Run on ``loop`` (call from its thread): send every request without blocking and return; call
        ``on_answer`` on the loop once per exchange as answers complete, unanswered ones at the deadline
        (``status=None, timed_out=True``); nothing more after :meth:`abort`. Hosts must be IP addresses
        (a name lookup would block the loop): a name is answered with an error, not looked up.
        """
        self._wake_r.close()
        self._wake_w.close()
        self._loop, self._on_answer = loop, on_answer
        self._on_loop = watch = _OnLoop(loop, self._loop_step)
        early = []
        for index, exchange in enumerate(self._exchanges):
            flight = _Flight(index, exchange, self._request(exchange))
            answer = self._start(flight, watch, socket.AI_NUMERICHOST)
            if answer is None:
                self._flights[index] = flight
            else:
                early.append(answer)
        if self._flights and self._deadline is not None:
            self._timer = loop.call_at(self._deadline, self._expire)
        for answer in early:  # after start returns: the caller is set up to take them
            loop.call_soon(functools.partial(self._early, answer))

    def _early(self, answer: Answer) -> None:
        if not self._aborted:
            self._on_answer(answer)

    def _loop_step(self, flight: _Flight, mask: int) -> None:
        if self._on_loop is None or flight.index not in self._flights:
            return
        answer = self._step(flight, mask, self._on_loop)
        if answer is not None:
            del self._flights[flight.index]
            if not self._flights and self._timer is not None:
                self._timer.cancel()
            self._on_answer(answer)

    def _expire(self) -> None:
        flights, self._flights = self._flights, {}
        for flight in flights.values():
            if self._on_loop is not None:
                self._drop(flight, self._on_loop)
        for flight in flights.values():
            if not self._aborted:
                self._on_answer(Answer(flight.index, None, error="no answer before the deadline", timed_out=True))

    def _drop_all(self) -> None:
        flights, self._flights = self._flights, {}
        if self._timer is not None:
            self._timer.cancel()
        for flight in flights.values():
            if self._on_loop is not None:
                self._drop(flight, self._on_loop)

    def run(self, on_answer: Callable[[Answer], None]) -> None:
        """Send every request and call ``on_answer`` once per exchange as answers complete.

        Returns when every exchange is answered, or at the deadline (each unanswered exchange is
        answered with ``status=None``), or on :meth:`abort` (nothing more is answered).
        """
        selector = selectors.DefaultSelector()
        flights: dict[int, _Flight] = {}
        try:
            selector.register(self._wake_r, selectors.EVENT_READ, None)
            for index, exchange in enumerate(self._exchanges):
                flight = _Flight(index, exchange, self._request(exchange))
                answer = self._start(flight, selector)
                if answer is None:
                    flights[index] = flight
                else:
                    on_answer(answer)
            while flights and not self._aborted:
                timeout = None if self._deadline is None else self._deadline - self._clock()
                if timeout is not None and timeout <= 0:
                    break
                for key, mask in selector.select(timeout):
                    if key.data is None:
                        return
                    flight = key.data
                    answer = self._step(flight, mask, selector)
                    if answer is not None:
                        del flights[flight.index]
                        on_answer(answer)
            if not self._aborted:
                for flight in list(flights.values()):
                    self._drop(flight, selector)
                    on_answer(Answer(flight.index, None, error="no answer before the deadline", timed_out=True))
                flights.clear()
        finally:
            for flight in flights.values():
                self._drop(flight, selector)
            selector.close()
            self._wake_r.close()
            self._wake_w.close()

    # --- one exchange ----------------------------------------------------------------------------

    def _request(self, exchange: Exchange) -> bytes:
        return request_bytes(exchange.method, exchange.path, exchange.host, exchange.port, self._pool.token,
                             self._pool.job, exchange.body)

    def _start(self, flight: _Flight, selector: _Watch, flags: int = 0) -> Optional[Answer]:
        exchange = flight.exchange
        sock = self._pool.checkout(exchange.host, exchange.port)
        if sock is not None:
            sock.setblocking(False)  # it may have carried a blocking exchange last
            flight.sock = sock
            selector.register(sock, selectors.EVENT_WRITE, flight)
            return None
        try:
            family, kind, proto, _, address = socket.getaddrinfo(exchange.host, exchange.port,
                                                                 type=socket.SOCK_STREAM, flags=flags)[0]
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

    def _step(self, flight: _Flight, mask: int, selector: _Watch) -> Optional[Answer]:
        sock = flight.sock
        if sock is None:
            return Answer(flight.index, None, error="internal: no socket")
        if flight.connecting:
            code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                self._drop(flight, selector)
                return self._connect_failed(flight, code)
            flight.connecting = False
        if mask & selectors.EVENT_WRITE and flight.out:
            return self._send(flight, selector)
        if mask & selectors.EVENT_READ:
            return self._receive(flight, selector)
        return None

    def _send(self, flight: _Flight, selector: _Watch) -> Optional[Answer]:
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
            self._drop(flight, selector)
            return Answer(flight.index, None, error=f"sending to {self._peer(flight)} failed: {exc}")
        flight.out = flight.out[sent:]
        if not flight.out:
            selector.modify(sock, selectors.EVENT_READ, flight)
        return None

    def _receive(self, flight: _Flight, selector: _Watch) -> Optional[Answer]:
        sock = flight.sock
        if sock is None:
            return None
        try:
            chunk = sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError as exc:
            self._drop(flight, selector)
            return Answer(flight.index, None, error=f"receiving from {self._peer(flight)} failed: {exc}")
        if not chunk:
            self._drop(flight, selector)
            return Answer(flight.index, None, error=f"{self._peer(flight)} closed the connection before answering")
        flight.inbuf += chunk
        return self._complete(flight, selector)

    def _complete(self, flight: _Flight, selector: _Watch) -> Optional[Answer]:
        data = flight.inbuf
        try:
            head = parse_head(data)
        except ValueError as exc:
            self._drop(flight, selector)
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

    def _connect_failed(self, flight: _Flight, code: int) -> Answer:
        return Answer(flight.index, None, error=f"cannot connect to {self._peer(flight)}: {os.strerror(code)}",
                      refused=code == errno.ECONNREFUSED)

    def _drop(self, flight: _Flight, selector: _Watch) -> None:
        sock, flight.sock = flight.sock, None
        if sock is None:
            return
        with contextlib.suppress(KeyError, ValueError):
            selector.unregister(sock)
        sock.close()

    @staticmethod
    def _peer(flight: _Flight) -> str:
        return host_port(flight.exchange.host, flight.exchange.port)


def decoded(index: int, status: int, raw: bytes) -> Answer:
    """The answer of a complete response: its status and its body, which must be a JSON object."""
    try:
        body = json.loads(raw) if raw else {}
    except (json.JSONDecodeError, UnicodeDecodeError):
        return Answer(index, status, error="response is not JSON")
    if not isinstance(body, dict):
        return Answer(index, status, error="response is not a JSON object")
    return Answer(index, status, body)
