"""The agent's HTTP server: a small authenticated JSON server. Standard library only.

Every route but ``GET /healthz`` requires ``Authorization: Bearer <job token>``, compared with
``hmac.compare_digest``, and a request that names a job (``contract.JOB_HEADER``, which every agent
sends) must name this one: another job's is refused with 403, never merged. Request bodies are
capped (413 past the cap), must be JSON objects (400 otherwise), and need a ``Content-Length`` (411
without one). One event loop per server serves every connection; handlers that block run in a small
bounded pool (:class:`AgentServer`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import selectors
import socket
import sys
import threading
from http import HTTPStatus
from typing import Any, Callable, Collection, Mapping, Optional, Union

from runtime.agent import contract
from runtime.agent.errors import HttpError
from runtime.agent.net import messages
from runtime.agent.net.connection import REQUEST_STALL, Call, Connection, Pending
from runtime.agent.net.handlers import HandlerPool
from runtime.agent.net.loop import EventLoop
from runtime.agent.net.messages import Request, Response, RouteKey, Routes
from runtime.agent.net.requesthead import MAX_LINE, Headers, RequestHead
from runtime.agent.spec import agent_http
from runtime.agent.spec.address import bind_family
from runtime.agent.spec.agent_http import UNAUTHORIZED, authorized, body_length, json_object, other_job, route

LONG_WORKERS = 32
"""Most threads running long handlers (calls and execs, which hold their thread while the call runs;
one call runs at a time per job, the rest wait for it there)."""
SHORT_WORKERS = 8
"""Most threads running the other handlers that may block (output reads, code trees)."""
URGENT_WORKERS = 4
"""Most threads running the handlers whose answer another node is waiting on to decide membership (votes,
probes): a pool of their own, so that a run of long-polled output reads never holds one past its timeout."""
RECV_BYTES = 1 << 16
"""Bytes read from a connection per readiness event."""
ACCEPTS_PER_WAKE = 256
"""Most connections accepted per readiness of the listening socket (then the others get a turn)."""
_REASONS: dict[int, str] = {status: status.phrase for status in HTTPStatus}

Deferred = Callable[[Request, Callable[[Response], None]], bool]
"""A handler run on the loop that answers later: ``handler(request, respond)`` returns ``True`` when it
took the request (it then calls ``respond`` exactly once, from any thread), ``False`` to have the
route's ordinary handler run in the pool instead (a request it cannot serve without blocking)."""


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
    sends its head byte by byte, or never reads its answer, holds its own connection and nothing else; one silent
    for ``REQUEST_STALL`` s in the middle of a request is answered 408 and closed (``Connection.time_stall``).

    Handlers named in ``on_loop`` run on the loop (they must not block: a lock held briefly, a queue
    put); the others run in a bounded pool (``handlers.HandlerPool``), those in ``long_running`` in
    one of :data:`LONG_WORKERS` threads, those in ``urgent`` in one of :data:`URGENT_WORKERS`, the rest in one of
    :data:`SHORT_WORKERS`, so a blocking handler never stalls the loop, a run of long calls never starves a vote
    or an output read, and a run of output reads never starves a vote or a probe.
    Handlers in ``deferred`` run on the loop and answer when their work is done (:data:`Deferred`):
    a call's hop through this node, whose children's requests run on the same loop (:attr:`loop`).

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
        urgent: routes whose answer decides membership (a vote, a probe), run in a pool of their own.
        deferred: routes tried on the loop first (:data:`Deferred`); the route's handler in ``routes``
            serves what they decline.

    Raises:
        OSError: the address cannot be bound.
    """

    def __init__(self, address: tuple[str, int], token: str, routes: Routes, *, max_body: int, job: str,
                 on_loop: Collection[RouteKey] = (), long_running: Collection[RouteKey] = (),
                 urgent: Collection[RouteKey] = (), deferred: Optional[Mapping[RouteKey, Deferred]] = None) -> None:
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
        self._urgent = frozenset(urgent)
        self._deferred = dict(deferred or {})
        self._long = HandlerPool(LONG_WORKERS, "agent-call")
        self._short = HandlerPool(SHORT_WORKERS, "agent-handler")
        self._membership = HandlerPool(URGENT_WORKERS, "agent-membership")
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
        self.loop = EventLoop()
        """The loop serving every connection; the agent's peer client runs its batches on it too."""
        self._conns: set[Connection] = set()
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None

    @property
    def open_connections(self) -> int:
        """Connections open now."""
        with self._lock:
            return len(self._conns)

    def start(self) -> threading.Thread:
        """Serve in a daemon thread (the loop); returns it."""
        self.loop.register(self.socket, selectors.EVENT_READ, lambda _mask: self._accept())
        self._thread = threading.Thread(target=self.loop.run, args=(self._close_all,), name="agent-http", daemon=True)
        self._thread.start()
        return self._thread

    def stop(self) -> None:
        """Stop serving now: close the listening socket and every connection (a running request goes unanswered)."""
        self.loop.stop()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        if self._thread is None:
            self._close_all()

    def close_connections(self) -> None:
        """Shut down every open connection now (any thread), as a dead node's would; new ones are still accepted."""
        with self._lock:
            socks = [conn.sock for conn in self._conns]
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    # --- the loop ----------------------------------------------------------------------------------

    def _done(self, conn: Connection, response: Response, keep_alive: bool) -> None:
        """A handler's answer to the connection's running request (loop)."""
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
            conn = Connection(sock, str(peer[0]))
            conn.watcher = functools.partial(self._on_event, conn)
            self.accepted += 1
            with self._lock:
                self._conns.add(conn)
            self._watch(conn)

    def _on_event(self, conn: Connection, mask: int) -> None:
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
                conn.read_at = self.loop.now()
        if not conn.closed:
            self._advance(conn)

    def _advance(self, conn: Connection) -> None:
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
            pending = conn.drop_unneeded(conn.pending)
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
            conn.time_stall(self.loop, lambda: self._stalled(conn))
            self._watch(conn)

    def _stalled(self, conn: Connection) -> None:
        """The client sent nothing for ``REQUEST_STALL`` s in the middle of a request: 408, then close."""
        self._answer(conn, messages.error(408, f"no byte of the request came for {REQUEST_STALL:g} s; send the "
                                               "whole request, or open a new connection"), keep_alive=False)
        self._advance(conn)

    def _watch(self, conn: Connection) -> None:
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
            self.loop.register(conn.sock, events, conn.watcher)
        elif events == 0:
            self.loop.unregister(conn.sock)
        else:
            self.loop.modify(conn.sock, events, conn.watcher)
        conn.events = events

    # --- one request -------------------------------------------------------------------------------

    def _plan(self, conn: Connection, head: RequestHead) -> Pending:
        """What follows a head: the body to read, then a fixed answer or a handler (auth, job and
        route checked first, as the body need not be read to refuse)."""
        headers = head.headers
        connection = (headers.get("Connection") or "").lower()
        keep_alive = (head.keep_alive and connection != "close") or connection == "keep-alive"
        method, path = head.method, head.target.split("?", 1)[0]
        if method == "GET" and path == contract.ROUTE_HEALTHZ:
            return self._drained(conn, headers, keep_alive, Response(200, {"ok": True}))
        if not authorized(headers.get(contract.AUTH_HEADER), self.token):
            return self._drained(conn, headers, keep_alive, messages.error(401, UNAUTHORIZED))
        named = headers.get(contract.JOB_HEADER)
        if named is not None and named != self.job:
            return self._drained(conn, headers, keep_alive, messages.error(403, other_job(self.job, named)))
        try:
            handler = route(self.routes, method, path)
        except HttpError as exc:
            return self._drained(conn, headers, keep_alive, messages.error(exc.status, str(exc)))
        if method not in ("PUT", "POST"):
            return self._drained(conn, headers, keep_alive, Call(method, path, handler, False))
        try:
            length = body_length(headers.get("Content-Length"), self.max_body)
        except HttpError as exc:
            return Pending(0, messages.error(exc.status, str(exc)), False)
        self._continue(conn, headers)
        return Pending(length, Call(method, path, handler, True), keep_alive)

    def _drained(self, conn: Connection, headers: Headers, keep_alive: bool, then: Union[Response, Call]) -> Pending:
        """Drop a body the answer does not need as it comes, then answer (past the cap, unreadable, or a fixed
        answer to a client waiting for ``100 Continue``: answer at once and close; that body is never asked for)."""
        try:
            length = int(headers.get("Content-Length") or 0)
        except ValueError:
            return Pending(0, then, False)
        waits = agent_http.expects_continue(headers.get("Expect"))
        if 0 < length <= self.max_body and not (waits and isinstance(then, Response)):
            self._continue(conn, headers)
            return Pending(length, then, keep_alive, discard=True)
        return Pending(0, then, keep_alive and not length)

    def _continue(self, conn: Connection, headers: Headers) -> None:
        """Answer ``Expect: 100-continue`` (curl sends it for bodies over 1 KiB) before the body is read."""
        if agent_http.expects_continue(headers.get("Expect")):
            conn.out += b"HTTP/1.1 100 Continue\r\n\r\n"
            self._flush(conn)

    def _dispatch(self, conn: Connection, pending: Pending, body: bytes) -> None:
        then = pending.then
        if isinstance(then, Response):
            self._answer(conn, then, pending.keep_alive)
            return
        try:
            parsed = json_object(body) if then.has_body else {}
        except HttpError as exc:
            self._answer(conn, messages.error(exc.status, str(exc)), pending.keep_alive)
            return
        gone = conn.gone
        request = Request(then.method, then.path, parsed, conn.peer, lambda wait: gone.wait(max(0.0, wait)),
                          conn.watch_hang_up)
        key = (then.method, then.path)
        deferred = self._deferred.get(key)
        if deferred is not None and self._deferring(conn, deferred, request, pending.keep_alive):
            return
        if key in self._on_loop:
            response, keep_alive = messages.run_handler(then.handler, request, pending.keep_alive)
            conn.answered()
            self._answer(conn, response, keep_alive)
            return
        conn.busy = True
        pool = self._long if key in self._long_running else self._membership if key in self._urgent else self._short
        pool.submit(lambda: self._finished(conn, *messages.run_handler(then.handler, request, pending.keep_alive)))

    def _deferring(self, conn: Connection, handler: Deferred, request: Request, keep_alive: bool) -> bool:
        """Offer the request to a deferred handler; whether it took it (or answered an error)."""
        conn.busy = True
        try:
            taken = handler(request, lambda response: self._finished(conn, response, keep_alive))
        except Exception as exc:  # the answers a pooled handler's error gets: an HttpError's status, else 500
            self._finished(conn, *messages.failed(exc, request, keep_alive))
            return True
        conn.busy = taken
        return taken

    def _finished(self, conn: Connection, response: Response, keep_alive: bool) -> None:
        """A handler's answer, handed to the loop (any thread; on the loop, after the current step)."""
        self.loop.call_soon(lambda: self._done(conn, response, keep_alive))

    def _answer(self, conn: Connection, response: Response, keep_alive: bool) -> None:
        data = response.encoded if response.encoded is not None else json.dumps(response.body).encode()
        closing = "" if keep_alive else "Connection: close\r\n"
        head = (f"HTTP/1.1 {response.status} {_REASONS.get(response.status, '')}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n{closing}\r\n")
        conn.out += head.encode() + data
        conn.closing = conn.closing or not keep_alive
        self._flush(conn)

    def _flush(self, conn: Connection) -> None:
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

    def _close(self, conn: Connection) -> None:
        if conn.closed:
            return
        conn.closed = True
        conn.time_stall(self.loop, lambda: None)
        conn.hang_up()
        if conn.events:
            self.loop.unregister(conn.sock)
            conn.events = 0
        conn.sock.close()
        with self._lock:
            self._conns.discard(conn)

    def _close_all(self) -> None:
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            self._close(conn)
        self.loop.unregister(self.socket)
        self.socket.close()
