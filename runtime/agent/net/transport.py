"""HTTP between agents: a small authenticated JSON server and client. Standard library only.

Every route but ``GET /healthz`` requires ``Authorization: Bearer <job token>``, compared with
``hmac.compare_digest``. Request bodies are capped (413 past the cap), must be JSON objects (400
otherwise), and need a ``Content-Length`` (411 without one).
"""

from __future__ import annotations

import contextlib
import hmac
import json
import socket
import socketserver
import sys
import threading
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Callable, Dict, Mapping, Optional, Tuple, Union

from runtime.agent import contract
from runtime.agent.errors import TransportError, Unauthorized
from runtime.agent.net.http11 import ResponseHead, parse_head, request_bytes


@dataclass(frozen=True)
class Request:
    """One authenticated request as a route handler sees it.

    Attributes:
        method: ``GET``, ``PUT`` or ``POST``.
        path: the path without query string.
        body: the decoded JSON object (empty for GET).
        peer: the client's address.
    """

    method: str
    path: str
    body: Mapping[str, Any]
    peer: str


@dataclass(frozen=True)
class Response:
    """What a route handler returns: an HTTP status and a JSON object."""

    status: int
    body: Mapping[str, Any]


Handler = Callable[[Request], Response]
Routes = Dict[Tuple[str, str], Handler]


class HttpError(Exception):
    """Raised by a route handler to answer with ``status`` and ``{"error": message}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


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
        address: ``(host, port)`` to bind; port 0 picks a free one.
        token: the job's bearer token.
        routes: ``(method, path)`` to handler.
        max_body: request body cap, bytes.
    """

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int], token: str, routes: Routes, max_body: int) -> None:
        self.token = token
        self.routes = routes
        self.max_body = max_body
        self.requests_served = 0
        self._count_lock = threading.Lock()
        super().__init__(address, _RequestHandler)

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
        host, port = self.server_address[:2]
        while stopper.is_alive():
            with contextlib.suppress(OSError):
                socket.create_connection((host or "127.0.0.1", port), timeout=0.2).close()
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


MAX_LINE = 64 * 1024
"""Longest request line or header line accepted, bytes (as ``http.server``'s ``_MAXLINE``)."""
MAX_HEADERS = 100
"""Most header lines accepted per request (as ``http.client``'s ``_MAXHEADERS``)."""
_REASONS = {status: status.phrase for status in HTTPStatus}


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
        handler = self.server.routes.get((method, path))
        if handler is None:
            self._drain()
            known = any(p == path for _, p in self.server.routes)
            raise HttpError(405 if known else 404, f"no route {method} {path}")
        body = self._read_body() if method in ("PUT", "POST") else {}
        return handler(Request(method, path, body, self.client_address[0]))

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


def request_json(
    host: str,
    port: int,
    method: str,
    path: str,
    token: str,
    body: Union[Mapping[str, Any], bytes, None] = None,
    timeout: float = 5.0,
) -> dict[str, Any]:
    """One JSON request to an agent; a new connection each time.

    Args:
        host: address or host name of the agent.
        port: its TCP port.
        method: HTTP method.
        path: route.
        token: the job token, sent as a bearer token.
        body: JSON object to send, the same already encoded (bytes, for one body sent to many
            agents), or ``None``.
        timeout: socket timeout, seconds.

    Returns:
        The decoded JSON object of a 2xx response.

    Raises:
        Unauthorized: the agent answered 401.
        TransportError: no connection, a timeout, a non-2xx status, or a body that is not JSON.
            ``status`` is ``None`` when no response arrived.
    """
    link = PeerConnection(host, port, token, timeout)
    try:
        return link.request(method, path, body)
    finally:
        link.close()


class PeerConnection:
    """Requests to one agent over a kept-alive connection (the heartbeat's link to its parent).

    A beat every fraction of a second to the same peer would otherwise cost a TCP handshake and a
    server thread each time. One blocking exchange at a time, so not ``multiplex.Batch``, which
    drives many at once and sets up a selector and a wake-up socket pair per batch. Not
    thread-safe: one owner thread.

    Args:
        host: address or host name of the agent.
        port: its TCP port.
        token: the job token.
        timeout: socket timeout per request, seconds.
    """

    def __init__(self, host: str, port: int, token: str, timeout: float) -> None:
        self.host = host
        self.port = port
        self.timeout = timeout
        self._token = token
        self._sock: Optional[socket.socket] = None

    def request(self, method: str, path: str, body: Union[Mapping[str, Any], bytes, None] = None) -> dict[str, Any]:
        """One exchange; a connection the peer closed while idle is reopened once.

        Returns and raises as :func:`request_json`; after an error the next request reconnects.
        """
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        message = request_bytes(method, path, self.host, self.port, self._token, data)
        where = f"{method} http://{self.host}:{self.port}{path}"
        reused = self._sock is not None
        try:
            head, raw = self._exchange(message)
        except (OSError, ValueError) as exc:
            self.close()
            if reused and isinstance(exc, _Stale):
                return self.request(method, path, body)
            raise TransportError(f"{where} failed: {exc}") from exc
        if not head.keep_alive:
            self.close()
        try:
            payload = json.loads(raw) if raw else {}
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise TransportError(f"{method} {path}: response is not JSON", head.status) from None
        if not isinstance(payload, dict):
            raise TransportError(f"{method} {path}: response is not a JSON object", head.status)
        if head.status == 401:
            raise Unauthorized(f"{where}: 401 {payload.get('error', '')}", 401)
        if not 200 <= head.status < 300:
            raise TransportError(f"{where}: {head.status} {payload.get('error', '')}", head.status)
        return payload

    def close(self) -> None:
        """Close the connection."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _exchange(self, message: bytes) -> Tuple[ResponseHead, bytes]:
        """Send ``message``, read one response: its head and body.

        Raises:
            _Stale: the peer closed the connection before any byte of the response.
            OSError: connecting, sending or receiving failed (``TimeoutError`` past the timeout).
            ValueError: the response is malformed or ends early.
        """
        if self._sock is None:
            self._sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock = self._sock
        try:
            sock.sendall(message)
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise _Stale(str(exc)) from exc
        received = bytearray()
        head = None
        while True:
            try:
                chunk = sock.recv(1 << 16)
            except ConnectionResetError as exc:
                if received:
                    raise
                raise _Stale(str(exc)) from exc
            if not chunk:
                if received:
                    raise ValueError("the connection closed in the middle of the response")
                raise _Stale("the peer closed the connection without answering")
            received += chunk
            head = head or parse_head(received)
            if head is not None and len(received) >= head.body_start + head.length:
                return head, bytes(received[head.body_start:head.body_start + head.length])


class _Stale(ConnectionError):
    """The peer closed the connection before answering: on a kept-alive connection, it had closed it while
    idle, and the request can be sent again on a new one (nothing of it was processed)."""


def port_is_free(host: str, port: int) -> bool:
    """Whether a TCP port can be bound on ``host`` right now by a listener that sets ``SO_REUSEADDR``
    (as torch's TCPStore and the agent do), so a previous job's ``TIME_WAIT`` connections don't count."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True
