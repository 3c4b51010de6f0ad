"""The agent's HTTP server: a small authenticated JSON server. Standard library only.

Every route but ``GET /healthz`` requires ``Authorization: Bearer <job token>``, compared with
``hmac.compare_digest``, and a request that names a job (``contract.JOB_HEADER``, which every agent
sends) must name this one: another job's is refused with 403, never merged. Request bodies are
capped (413 past the cap), must be JSON objects (400 otherwise), and need a ``Content-Length`` (411
without one).
"""

from __future__ import annotations

import contextlib
import hmac
import json
import select
import socket
import socketserver
import sys
import threading
import time
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from runtime.agent import contract
from runtime.agent.errors import HttpError
from runtime.agent.net.address import bind_family


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
    """

    method: str
    path: str
    body: Mapping[str, Any]
    peer: str
    hung_up: Optional[Callable[[float], bool]] = None


@dataclass(frozen=True)
class Response:
    """What a route handler returns: an HTTP status and a JSON object."""

    status: int
    body: Mapping[str, Any]


Handler = Callable[[Request], Response]
Routes = Dict[Tuple[str, str], Handler]


SERVE_POLL_INTERVAL = 30.0
"""Seconds the serving loop sleeps between checks for shutdown when no connection arrives. Long, as
:meth:`AgentServer.stop` wakes it with a connection; short ones woke a thousand in-process agents
(the control-plane benchmarks) two thousand times a second for nothing."""


class AgentServer(socketserver.ThreadingTCPServer):
    """A threading HTTP/1.1 server that dispatches to ``routes`` after auth and body checks.

    A ``socketserver`` TCP server with its own request handler rather than ``http.server``, whose
    ``HTTPServer`` looks up the bound address in reverse DNS (seconds per agent where that does not
    answer) and whose handler parses heads with the ``email`` package (see ``_RequestHandler``).

    Args:
        address: ``(host, port)`` to bind, either family; host ``""`` binds every interface, dual-stack
            (``::`` with ``IPV6_V6ONLY`` off, so IPv4 clients reach it as ``::ffff:a.b.c.d``) where this
            host has IPv6, else ``0.0.0.0``; port 0 picks a free one.
        token: the job's bearer token.
        routes: ``(method, path)`` to handler.
        max_body: request body cap, bytes.
        job: the job id this server serves; a request naming another is refused (403).
    """

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int], token: str, routes: Routes, max_body: int, *, job: str) -> None:
        self.token = token
        self.job = job
        self.routes = routes
        self.max_body = max_body
        self.requests_served = 0
        self._count_lock = threading.Lock()
        self.address_family, host = bind_family(address[0])
        super().__init__((host, address[1]), _RequestHandler)

    def server_bind(self) -> None:
        """Bind, dual-stack when bound to every IPv6 interface (``::``)."""
        if self.address_family == socket.AF_INET6 and self.server_address[0] == "::":
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()

    def count_request(self) -> None:
        """Count one request (any route, any status); read back as ``requests_served``."""
        with self._count_lock:
            self.requests_served += 1

    def start(self) -> threading.Thread:
        """Serve in a daemon thread; returns it."""
        thread = threading.Thread(target=self.serve_forever, args=(SERVE_POLL_INTERVAL,), name="agent-http",
                                  daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        """Stop serving now and close the socket: wakes the serving loop with a connection instead of
        waiting out its poll interval (:data:`SERVE_POLL_INTERVAL`)."""
        stopper = threading.Thread(target=self.shutdown, daemon=True)
        stopper.start()
        bound, port = self.server_address[:2]
        host = {"::": "::1", "0.0.0.0": "127.0.0.1"}.get(str(bound), str(bound))
        while stopper.is_alive():
            with contextlib.suppress(OSError):
                socket.create_connection((host, port), timeout=0.2).close()
            stopper.join(0.02)
        self.server_close()

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that went away mid-reply (broken pipe, reset) is not an error worth a traceback."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


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


MAX_LINE = 64 * 1024
"""Longest request line or header line accepted, bytes (as ``http.server``'s ``_MAXLINE``)."""
MAX_HEADERS = 100
"""Most header lines accepted per request (as ``http.client``'s ``_MAXHEADERS``)."""
_REASONS: dict[int, str] = {status: status.phrase for status in HTTPStatus}
_HANGUP_EVENTS = select.POLLIN | select.POLLHUP | select.POLLERR | getattr(select, "POLLRDHUP", 0)
"""What :meth:`_RequestHandler._hung_up` watches for (``POLLRDHUP``, the peer's end of writing, on Linux)."""


class _Headers:
    """A request's headers, names case-insensitive: ``get(name)`` as on ``email.message.Message``."""

    def __init__(self, fields: Dict[str, str]) -> None:
        self._fields = fields

    def get(self, name: str, default: Optional[str] = None) -> Optional[str]:
        return self._fields.get(name.lower(), default)


class _RequestHandler(socketserver.StreamRequestHandler):
    """HTTP/1.1 with kept-alive connections, parsed by hand.

    ``http.server.BaseHTTPRequestHandler`` parses every head with the ``email`` package and stamps
    every answer with a formatted date: about half of an agent's CPU per heartbeat or ``/healthz``.
    This reads the request line and ``Name: value`` lines directly (RFC 9112's message format, with
    ``http.server``'s line and header-count limits), answers ``Expect: 100-continue``, and keeps the
    connection open unless the client asks otherwise (HTTP/1.0 without ``keep-alive``, or
    ``Connection: close``).
    """

    server: AgentServer
    disable_nagle_algorithm = True
    wbufsize = -1  # buffered: head and body leave in one send, flushed after each request

    def handle(self) -> None:
        """Serve the connection's requests; a peer that hangs up (an aborted fan-out) ends it quietly."""
        try:
            while self._serve_one():
                pass
        except (BrokenPipeError, ConnectionResetError):
            return

    def _serve_one(self) -> bool:
        """Read, answer and flush one request; whether the connection stays open for another."""
        try:
            line = self.rfile.readline(MAX_LINE + 1)
            if not line:
                return False
            method, path, keep_alive = self._request_line(line)
            self.headers = self._read_headers()
        except HttpError as exc:  # an unparsable head: answer, then close
            self._reply(Response(exc.status, {"error": str(exc)}), keep_alive=False)
            return False
        connection = (self.headers.get("Connection") or "").lower()
        keep_alive = (keep_alive and connection != "close") or connection == "keep-alive"
        self.close_connection = not keep_alive
        self.server.count_request()
        try:
            response = self._handle(method, path.split("?", 1)[0])
        except HttpError as exc:
            response = Response(exc.status, {"error": str(exc)})
        self._reply(response, keep_alive=not self.close_connection)
        return not self.close_connection

    @staticmethod
    def _request_line(line: bytes) -> Tuple[str, str, bool]:
        """``(method, target, keep-alive by default)`` of ``METHOD target HTTP/1.x``."""
        if len(line) > MAX_LINE:
            raise HttpError(414, "request line too long")
        parts = line.decode("latin-1").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise HttpError(400, f"malformed request line {line[:80]!r}")
        return parts[0], parts[1], parts[2] != "HTTP/1.0"

    def _read_headers(self) -> _Headers:
        fields: Dict[str, str] = {}
        for _ in range(MAX_HEADERS + 1):
            line = self.rfile.readline(MAX_LINE + 1)
            if len(line) > MAX_LINE:
                raise HttpError(431, "header line too long")
            if line in (b"\r\n", b"\n", b""):
                return _Headers(fields)
            name, sep, value = line.decode("latin-1").partition(":")
            if not sep or not name or name != name.strip():
                raise HttpError(400, f"malformed header line {line[:80]!r}")
            fields[name.lower()] = value.strip()
        raise HttpError(431, f"more than {MAX_HEADERS} header lines")

    def _handle(self, method: str, path: str) -> Response:
        if method == "GET" and path == contract.ROUTE_HEALTHZ:
            self._drain()
            return Response(200, {"ok": True})
        if not authorized(self.headers.get(contract.AUTH_HEADER), self.server.token):
            self._drain()
            raise HttpError(401, "missing or wrong bearer token")
        named = self.headers.get(contract.JOB_HEADER)
        if named is not None and named != self.server.job:
            self._drain()
            raise HttpError(403, f"this agent serves job {self.server.job!r}, not {named!r}: a request from "
                                 f"another job is refused")
        try:
            handler = route(self.server.routes, method, path)
        except HttpError:
            self._drain()
            raise
        body = self._read_body() if method in ("PUT", "POST") else {}
        return handler(Request(method, path, body, self.client_address[0], self._hung_up))

    def _hung_up(self, wait: float) -> bool:
        """Whether the client hangs up within ``wait`` seconds (:attr:`Request.hung_up`).

        HTTP/1.1 clients send nothing more on a connection while they wait for its answer, so the
        socket turning readable with nothing to read (end of stream), or an error on it, means the
        client went: a driver interrupted or killed, or its connection cut. A client that did send more
        (a pipelined request) is still there.
        """
        deadline = time.monotonic() + max(0.0, wait)
        poller = select.poll()
        poller.register(self.connection, _HANGUP_EVENTS)
        try:
            events = poller.poll(max(0.0, wait) * 1000)
        except OSError:
            return True
        if not events:
            return False
        if events[0][1] & ~select.POLLIN:
            return True
        try:
            ended = self.connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True
        if not ended:  # more came: readable until it is read, so poll() would answer at once again
            time.sleep(max(0.0, deadline - time.monotonic()))
        return ended

    def _read_body(self) -> Mapping[str, Any]:
        length_text = self.headers.get("Content-Length")
        if length_text is None:
            self.close_connection = True
            raise HttpError(411, "Content-Length required")
        try:
            length = int(length_text)
        except ValueError:
            self.close_connection = True
            raise HttpError(400, f"bad Content-Length {length_text!r}") from None
        if length > self.server.max_body:
            self.close_connection = True
            raise HttpError(413, f"body of {length} bytes exceeds the {self.server.max_body}-byte cap")
        self._continue()
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise HttpError(400, f"body is not valid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise HttpError(400, "body must be a JSON object")
        return body

    def _continue(self) -> None:
        """Answer ``Expect: 100-continue`` (curl sends it for bodies over 1 KiB) before reading the body."""
        if (self.headers.get("Expect") or "").lower() == "100-continue":
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.wfile.flush()

    def _drain(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if 0 < length <= self.server.max_body:
            self._continue()
            self.rfile.read(length)
        elif length:
            self.close_connection = True

    def _reply(self, response: Response, keep_alive: bool) -> None:
        data = json.dumps(response.body).encode()
        closing = "" if keep_alive else "Connection: close\r\n"
        head = (f"HTTP/1.1 {response.status} {_REASONS.get(response.status, '')}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n{closing}\r\n")
        self.wfile.write(head.encode() + data)
        self.wfile.flush()
