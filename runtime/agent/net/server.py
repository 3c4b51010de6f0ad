"""The agent's HTTP server: a small authenticated JSON server. Standard library only.

Every route but ``GET /healthz`` requires ``Authorization: Bearer <job token>``, compared with
``hmac.compare_digest``, and a request that names a job (``contract.JOB_HEADER``, which every agent
sends) must name this one: another job's is refused with 403, never merged. Request bodies are
capped (413 past the cap), must be JSON objects (400 otherwise), and need a ``Content-Length`` (411
without one). One event loop per server serves every connection; handlers that block run in a small
bounded pool (:class:`AgentServer`).
"""

from __future__ import annotations

import collections
import contextlib
import hmac
import json
import selectors
import socket
import sys
import threading
import traceback
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Callable, Collection, Dict, Mapping, NamedTuple, Optional, Tuple, Union

from runtime.agent import contract
from runtime.agent.errors import HttpError
from runtime.agent.net.address import bind_family
from runtime.agent.net.handlers import HandlerPool
from runtime.agent.net.requesthead import MAX_LINE, Headers, HeadReader, RequestHead


@dataclass(frozen=True)
class Request:
    """One authenticated request as a route handler sees it.

    Attributes:
        method: ``GET``, ``PUT`` or ``POST``.
        path: the path without query string.
        body: the decoded JSON object (empty for GET).
        peer: the client's address.
        hung_up: ``hung_up(wait)`` waits up to ``wait`` seconds for the client to hang up (close or
            reset its connection, or end its writing side) and says whether it did, so a long request
            can stop working for a client that has gone; ``None`` where the request came over no
            connection (an in-memory transport).
        on_hang_up: ``on_hang_up(f)`` has the server call ``f()`` once the client hangs up while this
            request runs (at once if it already has): from the server's loop, so ``f`` must not block
            (a queue put); never after the request is answered. ``None`` as for :attr:`hung_up`.
    """

    method: str
    path: str
    body: Mapping[str, Any]
    peer: str
    hung_up: Optional[Callable[[float], bool]] = None
    on_hang_up: Optional[Callable[[Callable[[], None]], None]] = None


@dataclass(frozen=True)
class Response:
    """What a route handler returns: an HTTP status and a JSON object."""

    status: int
    body: Mapping[str, Any]


Handler = Callable[[Request], Response]
Routes = Dict[Tuple[str, str], Handler]


def authorized(header: Optional[str], token: str) -> bool:
    """Whether an ``Authorization`` header carries ``token``, compared in constant time."""
    if not header:
        return False
    scheme, _, value = header.partition(" ")
    return scheme == contract.AUTH_SCHEME and hmac.compare_digest(value.strip().encode(), token.encode())


def route(routes: Routes, method: str, path: str) -> Handler:
    """The handler of ``method path``.

    Raises:
        HttpError: 405 when ``path`` is served for other methods only, 404 when it is not served.
    """
    handler = routes.get((method, path))
    if handler is None:
        known = any(p == path for _, p in routes)
        raise HttpError(405 if known else 404, f"no route {method} {path}")
    return handler


RouteKey = Tuple[str, str]

LONG_WORKERS = 32
"""Most threads running long handlers (calls and execs, which hold their thread while the call runs;
one call runs at a time per job, the rest wait for it there)."""
SHORT_WORKERS = 8
"""Most threads running the other handlers that may block (votes, output reads, code trees)."""
RECV_BYTES = 1 << 16
"""Bytes read from a connection per readiness event."""
ACCEPTS_PER_WAKE = 256
"""Most connections accepted per readiness of the listening socket (then the others get a turn)."""
_REASONS: dict[int, str] = {status: status.phrase for status in HTTPStatus}


class AgentServer:
    """An HTTP/1.1 server on one event loop that dispatches to ``routes`` after auth and body checks.

    One thread (``selectors``, epoll on Linux) accepts, reads, parses and writes every connection,
    kept alive unless the client asks otherwise (HTTP/1.0 without ``keep-alive``, or
    ``Connection: close``), so an agent's thread count does not grow with its connections. Heads are
    parsed by hand (``requesthead``: RFC 9112's format with ``http.server``'s limits), not with
    ``http.server``, whose ``HTTPServer`` looks up the bound address in reverse DNS and whose handler
    parses heads with the ``email`` package; ``Expect: 100-continue`` is answered. A connection is
    served one request at a time and is read only while the server wants its next bytes (or, while
    its request runs, to see it hang up), and written only when the socket takes bytes: a client that
    sends its head byte by byte, or never reads its answer, holds its own connection and nothing else.

    Handlers named in ``on_loop`` run on the loop (they must not block: a lock held briefly, a queue
    put); the others run in a bounded pool (``handlers.HandlerPool``), those in ``long_running`` in
    one of :data:`LONG_WORKERS` threads, the rest in one of :data:`SHORT_WORKERS`, so a blocking
    handler never stalls the loop, and a run of long calls never starves a vote or an output read.

    Args:
        address: ``(host, port)`` to bind, either family; host ``""`` binds every interface, dual-stack
            (``::`` with ``IPV6_V6ONLY`` off, so IPv4 clients reach it as ``::ffff:a.b.c.d``) where this
            host has IPv6, else ``0.0.0.0``; port 0 picks a free one.
        token: the job's bearer token.
        routes: ``(method, path)`` to handler.
        max_body: request body cap, bytes.
        job: the job id this server serves; a request naming another is refused (403).
        on_loop: routes whose handlers never block, run on the loop.
        long_running: routes whose handlers hold their thread for long (a call), run in the long pool.

    Raises:
        OSError: the address cannot be bound.
    """

    def __init__(self, address: tuple[str, int], token: str, routes: Routes, max_body: int, *, job: str,
                 on_loop: Collection[RouteKey] = (), long_running: Collection[RouteKey] = ()) -> None:
        self.token = token
        self.job = job
        self.routes = routes
        self.max_body = max_body
        self.requests_served = 0
        """Requests whose head parsed (any route, any status)."""
        self.accepted = 0
        """Connections accepted so far."""
        self._on_loop = frozenset(on_loop)
        self._long_running = frozenset(long_running)
        self._long = HandlerPool(LONG_WORKERS, "agent-call")
        self._short = HandlerPool(SHORT_WORKERS, "agent-handler")
        self.address_family, host = bind_family(address[0])
        self.socket = socket.socket(self.address_family, socket.SOCK_STREAM)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if self.address_family == socket.AF_INET6 and host == "::":
                self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            self.socket.bind((host, address[1]))
            self.socket.listen(1024)
        except OSError:
            self.socket.close()
            raise
        self.socket.setblocking(False)
        self.server_address: tuple[Any, ...] = self.socket.getsockname()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._done: collections.deque[tuple[_Connection, Response, bool]] = collections.deque()
        self._conns: set[_Connection] = set()
        self._lock = threading.Lock()
        self._stopping = False
        self._thread: Optional[threading.Thread] = None

    @property
    def open_connections(self) -> int:
        """Connections open now."""
        with self._lock:
            return len(self._conns)

    def start(self) -> threading.Thread:
        """Serve in a daemon thread (the loop); returns it."""
        self._selector.register(self.socket, selectors.EVENT_READ, None)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._thread = threading.Thread(target=self._serve, name="agent-http", daemon=True)
        self._thread.start()
        return self._thread

    def stop(self) -> None:
        """Stop serving now: close the listening socket and every connection (a request still running
        in the pool finishes unanswered)."""
        self._stopping = True
        self._wake()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        if self._thread is None:
            self._close_all()

    def close_connections(self) -> None:
        """Shut down every open connection now (from any thread), as a node that died would; the
        server keeps accepting new ones."""
        with self._lock:
            socks = [conn.sock for conn in self._conns]
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    # --- the loop ----------------------------------------------------------------------------------

    def _serve(self) -> None:
        try:
            while not self._stopping:
                for key, mask in self._selector.select():
                    if key.fileobj is self.socket:
                        self._accept()
                    elif key.fileobj is self._wake_r:
                        self._woken()
                    else:
                        self._on_event(key.data, mask)
        finally:
            self._close_all()

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            self._wake_w.send(b"x")

    def _woken(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            while self._wake_r.recv(4096):
                pass
        while True:
            try:
                conn, response, keep_alive = self._done.popleft()
            except IndexError:
                return
            conn.busy = False
            conn.answered()
            if not conn.closed:
                self._answer(conn, response, keep_alive)
                self._advance(conn)

    def _accept(self) -> None:
        for _ in range(ACCEPTS_PER_WAKE):
            try:
                sock, peer = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of descriptors, say: the others are served meanwhile
                print(f"agent http server: accept failed: {exc}", file=sys.stderr)
                return
            sock.setblocking(False)
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Connection(sock, str(peer[0]))
            self.accepted += 1
            with self._lock:
                self._conns.add(conn)
            self._watch(conn)

    def _on_event(self, conn: _Connection, mask: int) -> None:
        if mask & selectors.EVENT_WRITE:
            self._flush(conn)
        if mask & selectors.EVENT_READ and not conn.closed:
            try:
                chunk = conn.sock.recv(RECV_BYTES)
            except (BlockingIOError, InterruptedError):
                chunk = None
            except OSError:  # reset
                self._close(conn)
                return
            if chunk == b"":
                conn.eof = True
                conn.hang_up()
            elif chunk:
                conn.inbuf += chunk
        if not conn.closed:
            self._advance(conn)

    def _advance(self, conn: _Connection) -> None:
        """Take the connection's next step: parse what arrived, answer, or close; then watch it for
        what it waits for."""
        while not conn.closed and not conn.busy and not conn.out:
            if conn.closing:
                self._close(conn)
                return
            if conn.pending is None:
                try:
                    head = conn.head.take(conn.inbuf)
                except HttpError as exc:  # an unparsable head: answer, then close
                    self._answer(conn, Response(exc.status, {"error": str(exc)}), keep_alive=False)
                    continue
                if head is None:
                    if conn.eof:
                        self._close(conn)
                        return
                    break
                self.requests_served += 1
                conn.pending = self._plan(conn, head)
                continue
            pending = conn.pending
            if len(conn.inbuf) < pending.length:
                if conn.eof:
                    self._close(conn)
                    return
                break
            body = bytes(conn.inbuf[:pending.length])
            del conn.inbuf[:pending.length]
            conn.pending = None
            self._dispatch(conn, pending, body)
        if not conn.closed:
            self._watch(conn)

    def _watch(self, conn: _Connection) -> None:
        """Register the connection for what it waits for: to write its answer, to read its request
        (or, while its request runs, its hang-up), or nothing."""
        if conn.out:
            events = selectors.EVENT_WRITE
        elif conn.eof or (conn.busy and len(conn.inbuf) >= MAX_LINE):
            events = 0  # nothing more to read, or pipelined bytes enough until this request is answered
        else:
            events = selectors.EVENT_READ
        if events == conn.events:
            return
        if conn.events == 0:
            self._selector.register(conn.sock, events, conn)
        elif events == 0:
            self._selector.unregister(conn.sock)
        else:
            self._selector.modify(conn.sock, events, conn)
        conn.events = events

    # --- one request -------------------------------------------------------------------------------

    def _plan(self, conn: _Connection, head: RequestHead) -> _Pending:
        """What follows a head: the body to read, then a fixed answer or a handler (auth, job and
        route checked first, as the body need not be read to refuse)."""
        headers = head.headers
        connection = (headers.get("Connection") or "").lower()
        keep_alive = (head.keep_alive and connection != "close") or connection == "keep-alive"
        method, path = head.method, head.target.split("?", 1)[0]
        if method == "GET" and path == contract.ROUTE_HEALTHZ:
            return self._drained(conn, headers, keep_alive, Response(200, {"ok": True}))
        if not authorized(headers.get(contract.AUTH_HEADER), self.token):
            return self._drained(conn, headers, keep_alive, _error(401, "missing or wrong bearer token"))
        named = headers.get(contract.JOB_HEADER)
        if named is not None and named != self.job:
            return self._drained(conn, headers, keep_alive, _error(
                403, f"this agent serves job {self.job!r}, not {named!r}: a request from another job is refused"))
        try:
            handler = route(self.routes, method, path)
        except HttpError as exc:
            return self._drained(conn, headers, keep_alive, _error(exc.status, str(exc)))
        if method not in ("PUT", "POST"):
            return self._drained(conn, headers, keep_alive, _Call(method, path, handler, False))
        length_text = headers.get("Content-Length")
        if length_text is None:
            return _Pending(0, _error(411, "Content-Length required"), False)
        try:
            length = int(length_text)
        except ValueError:
            length = -1
        if length < 0:
            return _Pending(0, _error(400, f"bad Content-Length {length_text!r}"), False)
        if length > self.max_body:
            return _Pending(0, _error(413, f"body of {length} bytes exceeds the {self.max_body}-byte cap"), False)
        self._continue(conn, headers)
        return _Pending(length, _Call(method, path, handler, True), keep_alive)

    def _drained(self, conn: _Connection, headers: Headers, keep_alive: bool, then: Union[Response, _Call]) -> _Pending:
        """Read and drop a body the answer does not need (one past the cap, or unreadable: close after)."""
        try:
            length = int(headers.get("Content-Length") or 0)
        except ValueError:
            return _Pending(0, then, False)
        if 0 < length <= self.max_body:
            self._continue(conn, headers)
            return _Pending(length, then, keep_alive)
        return _Pending(0, then, keep_alive and not length)

    def _continue(self, conn: _Connection, headers: Headers) -> None:
        """Answer ``Expect: 100-continue`` (curl sends it for bodies over 1 KiB) before the body is read."""
        if (headers.get("Expect") or "").lower() == "100-continue":
            conn.out += b"HTTP/1.1 100 Continue\r\n\r\n"
            self._flush(conn)

    def _dispatch(self, conn: _Connection, pending: _Pending, body: bytes) -> None:
        then = pending.then
        if isinstance(then, Response):
            self._answer(conn, then, pending.keep_alive)
            return
        try:
            parsed = _json_object(body) if then.has_body else {}
        except HttpError as exc:
            self._answer(conn, _error(exc.status, str(exc)), pending.keep_alive)
            return
        gone = conn.gone
        request = Request(then.method, then.path, parsed, conn.peer, lambda wait: gone.wait(max(0.0, wait)),
                          conn.watch_hang_up)
        key = (then.method, then.path)
        if key in self._on_loop:
            response, keep_alive = _run(then.handler, request, pending.keep_alive)
            conn.answered()
            self._answer(conn, response, keep_alive)
            return
        conn.busy = True
        pool = self._long if key in self._long_running else self._short
        pool.submit(lambda: self._finished(conn, *_run(then.handler, request, pending.keep_alive)))

    def _finished(self, conn: _Connection, response: Response, keep_alive: bool) -> None:
        """A pooled handler's answer, handed to the loop (any thread)."""
        self._done.append((conn, response, keep_alive))
        self._wake()

    def _answer(self, conn: _Connection, response: Response, keep_alive: bool) -> None:
        data = json.dumps(response.body).encode()
        closing = "" if keep_alive else "Connection: close\r\n"
        head = (f"HTTP/1.1 {response.status} {_REASONS.get(response.status, '')}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n{closing}\r\n")
        conn.out += head.encode() + data
        conn.closing = conn.closing or not keep_alive
        self._flush(conn)

    def _flush(self, conn: _Connection) -> None:
        """Send what the socket takes now; the rest when it is writable again."""
        if conn.closed or not conn.out:
            return
        try:
            sent = conn.sock.send(conn.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # the client went (broken pipe, reset): nothing to tell it
            self._close(conn)
            return
        del conn.out[:sent]

    def _close(self, conn: _Connection) -> None:
        if conn.closed:
            return
        conn.closed = True
        conn.hang_up()
        if conn.events:
            with contextlib.suppress(KeyError, ValueError, OSError):
                self._selector.unregister(conn.sock)
            conn.events = 0
        conn.sock.close()
        with self._lock:
            self._conns.discard(conn)

    def _close_all(self) -> None:
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            self._close(conn)
        self._selector.close()
        self.socket.close()
        self._wake_r.close()
        self._wake_w.close()


class _Call(NamedTuple):
    """A request for a handler: what to run once the body has arrived."""

    method: str
    path: str
    handler: Handler
    has_body: bool


class _Pending(NamedTuple):
    """A parsed head's next step: ``length`` body bytes to read, then ``then`` (a fixed answer, or a
    handler to call), then the connection stays open if ``keep_alive``."""

    length: int
    then: Union[Response, _Call]
    keep_alive: bool


class _Connection:
    """One client connection's state, owned by the loop (``gone`` is read by handler threads)."""

    def __init__(self, sock: socket.socket, peer: str) -> None:
        self.sock = sock
        self.peer = peer
        self.inbuf = bytearray()
        self.out = bytearray()
        self.head = HeadReader()
        self.pending: Optional[_Pending] = None
        self.busy = False
        """A handler runs for this connection's request in a pool."""
        self.closing = False
        """Close once :attr:`out` is sent."""
        self.eof = False
        self.closed = False
        self.events = 0
        self.gone = threading.Event()
        """Set when the client hangs up (end of stream, a reset) or the connection closes: ``Request.hung_up``."""
        self._watchers: list[Callable[[], None]] = []
        self._watch_lock = threading.Lock()

    def watch_hang_up(self, watcher: Callable[[], None]) -> None:
        """``Request.on_hang_up`` (any thread)."""
        with self._watch_lock:
            if not self.gone.is_set():
                self._watchers.append(watcher)
                return
        watcher()

    def answered(self) -> None:
        """The running request is answered: its hang-up watchers are done (loop)."""
        with self._watch_lock:
            self._watchers.clear()

    def hang_up(self) -> None:
        """The client went: tell the running request (loop)."""
        with self._watch_lock:
            if self.gone.is_set():
                return
            self.gone.set()
            watchers, self._watchers = self._watchers, []
        for watcher in watchers:
            try:
                watcher()
            except Exception:  # a watcher's bug must not end the loop
                traceback.print_exc()


def _error(status: int, message: str) -> Response:
    return Response(status, {"error": message})


def _json_object(raw: bytes) -> Mapping[str, Any]:
    """A request body: a JSON object.

    Raises:
        HttpError: 400 for anything else.
    """
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise HttpError(400, f"body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise HttpError(400, "body must be a JSON object")
    return body


def _run(handler: Handler, request: Request, keep_alive: bool) -> tuple[Response, bool]:
    """The handler's answer, and whether the connection stays open: a handler's ``HttpError`` is its
    status; anything else it raises is a bug, answered 500 (traceback on stderr) and the connection closed."""
    try:
        return handler(request), keep_alive
    except HttpError as exc:
        return _error(exc.status, str(exc)), keep_alive
    except Exception as exc:  # a handler's bug must not end the loop: answer it
        traceback.print_exc()
        return _error(500, f"internal error serving {request.method} {request.path}: {exc!r}"), False
