"""Local mode's HTTP: one JSON request to an agent (its ``/info``) or to the rendezvous endpoint's join
service, and that service's server (``runtime.local.hosts``). Standard library only.

Both speak HTTP by the agents' rules (``runtime.agent.spec.agent_http``): every request carries the job's
token as ``Authorization: Bearer <token>`` and names its job (``contract.JOB_HEADER``); the server refuses
a wrong token (401) and another job (403), takes JSON object bodies up to a cap, and answers JSON objects,
an error as ``{"error": "<message>"}``; the client turns an answer into the same errors an agent's peer
does (``Unauthorized``, ``WrongJob``, ``TransportError`` with the status, or with ``None`` when no answer
came). A few requests a second at most travel here, so ``http.client`` and ``socketserver`` serve them:
the agents' own HTTP, built for thousands of peers, stays the agent's.
"""

from __future__ import annotations

import http.client
import json
import socket
import socketserver
import threading
import traceback
from dataclasses import dataclass
from email.message import Message
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable, Mapping, Optional, Union

from runtime.agent import contract
from runtime.agent.errors import HttpError, TransportError
from runtime.agent.spec.address import bind_family, url
from runtime.agent.spec.agent_http import (
    UNAUTHORIZED,
    authorized,
    body_length,
    json_object,
    other_job,
    refused,
    route,
)

DEFAULT_TIMEOUT = 5.0
"""Seconds a :func:`request_json` waits, by default."""
STOP_POLL = 0.05
"""Seconds between the server's looks at whether it is to stop (how long :meth:`JsonServer.stop` takes)."""
READ_TIMEOUT = 30.0
"""Seconds the server waits for each read of a request, so a client that stops sending holds its thread
no longer."""


def request_json(host: str, port: int, method: str, path: str, token: str,
                 body: Union[Mapping[str, Any], None] = None, timeout: float = DEFAULT_TIMEOUT, *,
                 job: str) -> dict[str, Any]:
    """One JSON request on a connection of its own.

    Args:
        host: address or host name (an IPv6 address bare).
        port: TCP port.
        method: HTTP method.
        path: route.
        token: the job token, sent as a bearer token.
        body: the JSON object to send, or ``None``.
        timeout: socket timeout, seconds.
        job: the job id the request is for (a server of another job refuses it).

    Returns:
        The decoded JSON object of a 2xx answer.

    Raises:
        Unauthorized: the answer was 401.
        WrongJob: the answer was 403: the server serves another job.
        TransportError: no connection, a timeout, a non-2xx status, or a body that is not a JSON
            object. ``status`` is ``None`` when no answer arrived.
    """
    where = f"{method} {url(host, port, path)}"
    data = None if body is None else json.dumps(body).encode()
    headers = {contract.AUTH_HEADER: f"{contract.AUTH_SCHEME} {token}", contract.JOB_HEADER: job}
    if data is not None:
        headers["Content-Type"] = "application/json"
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        connection.request(method, path, body=data, headers=headers)
        answer = connection.getresponse()
        status, raw = answer.status, answer.read()
    except (OSError, http.client.HTTPException) as exc:
        raise TransportError(f"{where} failed: {str(exc) or type(exc).__name__}") from None
    finally:
        connection.close()
    return _result(where, status, raw)


def _result(where: str, status: int, raw: bytes) -> dict[str, Any]:
    """The JSON object of a 2xx answer; otherwise the error it means (``spec.agent_http.refused``)."""
    problem = ""
    try:
        decoded = json.loads(raw) if raw else {}
    except (json.JSONDecodeError, UnicodeDecodeError):
        decoded, problem = {}, "response is not JSON"
    if not isinstance(decoded, dict):
        decoded, problem = {}, problem or "response is not a JSON object"
    if 200 <= status < 300 and not problem:
        return decoded
    raise refused(where, status, decoded, problem)


@dataclass(frozen=True)
class Request:
    """One authenticated request as a route's handler sees it.

    Attributes:
        method: the HTTP method.
        path: the path without query string.
        body: the decoded JSON object (empty without a body).
        peer: the client's address.
    """

    method: str
    path: str
    body: Mapping[str, Any]
    peer: str


@dataclass(frozen=True)
class Response:
    """What a route's handler returns: an HTTP status and a JSON object."""

    status: int
    body: Mapping[str, Any]


Routes = Mapping[tuple[str, str], Callable[[Request], Response]]
"""``(method, path)`` to handler; a handler's ``HttpError`` is answered with its status."""


class JsonServer:
    """A small authenticated JSON server, one thread per connection, bound on construction.

    Args:
        address: ``(host, port)`` to bind, either family (``spec.address.bind_family``); port 0 picks a
            free one.
        token: the job's bearer token.
        routes: what it serves.
        max_body: request body cap, bytes (413 past it).
        job: the job id it serves; a request naming another is refused (403).

    Raises:
        OSError: the address cannot be bound (not this host's, or taken).
    """

    def __init__(self, address: tuple[str, int], token: str, routes: Routes, *, max_body: int, job: str) -> None:
        self.token, self.routes, self.max_body, self.job = token, routes, max_body, job
        family, host = bind_family(address[0])
        self._server = _Server((host, address[1]), family, self)
        self.server_address: tuple[Any, ...] = self._server.server_address
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        """Serve in a daemon thread."""
        self._thread = threading.Thread(target=self._server.serve_forever, args=(STOP_POLL,), name="join-http",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop serving: the address refuses connections."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()

    def answer(self, method: str, path: str, headers: Message, raw: bytes, peer: str) -> Response:
        """The answer to one request whose body (when it has one within the cap) is ``raw``: checks in
        the agents' order, the token, the job and the route first."""
        if not authorized(headers.get(contract.AUTH_HEADER), self.token):
            return _error(401, UNAUTHORIZED)
        named = headers.get(contract.JOB_HEADER)
        if named is not None and named != self.job:
            return _error(403, other_job(self.job, named))
        try:
            handler = route(self.routes, method, path)
        except HttpError as exc:
            return _error(exc.status, str(exc))
        body: Mapping[str, Any] = {}
        if method in ("PUT", "POST"):
            try:
                body_length(headers.get("Content-Length"), self.max_body)
                body = json_object(raw)
            except HttpError as exc:
                return _error(exc.status, str(exc))
        try:
            return handler(Request(method, path, body, peer))
        except HttpError as exc:
            return _error(exc.status, str(exc))
        except Exception as exc:  # a handler's bug: answered, and on stderr
            traceback.print_exc()
            return _error(500, f"internal error serving {method} {path}: {exc!r}")


class _Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True
    allow_reuse_port = False  # a second server on the same address is refused, as the agents' is
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int], family: socket.AddressFamily, owner: JsonServer) -> None:
        self.address_family = family
        self.owner = owner
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        if self.address_family == socket.AF_INET6 and self.server_address[0] == "::":
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # dual-stack, as the agents'
        super().server_bind()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = READ_TIMEOUT

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_PUT(self) -> None:
        self._serve()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the launcher's terminal is the job's."""

    def _serve(self) -> None:
        owner = self.server.owner
        length = _length(self.headers.get("Content-Length"))
        try:  # read even a body that is refused: a connection closed on unread bytes is reset, its answer lost
            raw = self.rfile.read(length) if length is not None and 0 < length <= owner.max_body else b""
        except OSError:
            self.close_connection = True
            return
        response = owner.answer(self.command, self.path.split("?", 1)[0], self.headers, raw,
                                str(self.client_address[0]))
        data = json.dumps(response.body).encode()
        try:
            self.send_response(response.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client has gone
            self.close_connection = True


def _length(text: Optional[str]) -> Optional[int]:
    try:
        return None if text is None else int(text)
    except ValueError:
        return None


def _error(status: int, message: str) -> Response:
    return Response(status, {"error": message})
