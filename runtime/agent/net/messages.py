"""Requests and responses as the agent's route handlers see them, and a handler's failure as an answer: what
the server and the in-memory transport share (the token check and the route lookup: ``spec.agent_http``).
Standard library only."""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from runtime.agent.errors import HttpError


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
    """What a route handler returns: an HTTP status and a JSON object.

    Attributes:
        status: the HTTP status.
        body: the JSON object.
        encoded: ``body`` already encoded as JSON bytes (a large answer sent to many peers, encoded
            once), which the HTTP server sends instead of encoding ``body``; ``None`` to encode it.
    """

    status: int
    body: Mapping[str, Any]
    encoded: Optional[bytes] = None


Handler = Callable[[Request], Response]
RouteKey = Tuple[str, str]
"""A route: ``(method, path)``."""
Routes = Dict[RouteKey, Handler]


def error(status: int, message: str) -> Response:
    """A JSON error answer: ``{"error": message}`` with ``status``."""
    return Response(status, {"error": message})


def run_handler(handler: Handler, request: Request, keep_alive: bool) -> tuple[Response, bool]:
    """The handler's answer, and whether the connection stays open: a handler's ``HttpError`` is its
    status; anything else it raises is a bug, answered 500 (traceback on stderr) and the connection closed."""
    try:
        return handler(request), keep_alive
    except Exception as exc:  # a handler's bug must not end the loop: answer it
        return failed(exc, request, keep_alive)


def failed(exc: Exception, request: Request, keep_alive: bool) -> tuple[Response, bool]:
    """The answer to a request whose handler raised ``exc`` (while it is being handled), and whether
    the connection stays open: an ``HttpError`` is its status; anything else is a bug, answered 500
    (traceback on stderr) and the connection closed."""
    if isinstance(exc, HttpError):
        return error(exc.status, str(exc)), keep_alive
    traceback.print_exc()
    return error(500, f"internal error serving {request.method} {request.path}: {exc!r}"), False
