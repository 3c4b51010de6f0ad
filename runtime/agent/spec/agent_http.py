"""The agents' HTTP as every party to it speaks it: the job token a request carries, the job it names, the
route it asks for, its body (a JSON object), and an answer other than a 2xx as the error it means. The
agents' server and peer transport (``runtime.agent.net``), the in-memory network of the tests and local
mode's join service and its client (``runtime.local.json_http``) follow these rules. Standard library only.

Errors from the transport itself carry ``{"error": "<message>"}`` only (401, 403, 400, 404, 405, 411, 413);
a call's errors add ``kind`` and ``detail`` (``spec.wire``).
"""

from __future__ import annotations

import hmac
import json
from typing import Any, Mapping, Optional, TypeVar

from runtime.agent import contract
from runtime.agent.errors import HttpError, TransportError, Unauthorized, WrongJob

H = TypeVar("H")

UNAUTHORIZED = "missing or wrong bearer token"
"""The error of a request without the job's token (401)."""


def authorized(header: Optional[str], token: str) -> bool:
    """Whether an ``Authorization`` header carries ``token``, compared in constant time."""
    if not header:
        return False
    scheme, _, value = header.partition(" ")
    return scheme == contract.AUTH_SCHEME and hmac.compare_digest(value.strip().encode(), token.encode())


def other_job(serves: str, named: str) -> str:
    """The error of a request naming another job (403, ``contract.JOB_HEADER``) than the one served."""
    return f"this agent serves job {serves!r}, not {named!r}: a request from another job is refused"


def route(routes: Mapping[tuple[str, str], H], method: str, path: str) -> H:
    """The handler of ``method path`` in ``routes`` (``(method, path)`` to handler).

    Raises:
        HttpError: 405 when ``path`` is served for other methods only, 404 when it is not served.
    """
    handler = routes.get((method, path))
    if handler is None:
        known = any(p == path for _, p in routes)
        raise HttpError(405 if known else 404, f"no route {method} {path}")
    return handler


def expects_continue(expect: Optional[str]) -> bool:
    """Whether a request whose ``Expect`` header is ``expect`` (``None``: none) waits for ``100 Continue`` before
    its client sends the body."""
    return (expect or "").lower() == "100-continue"


def body_length(text: Optional[str], cap: int) -> int:
    """The length of a ``PUT`` or ``POST`` body from its ``Content-Length`` header (``None``: there is none).

    Raises:
        HttpError: 411 without the header, 400 when it is not a length, 413 past ``cap`` bytes.
    """
    if text is None:
        raise HttpError(411, "Content-Length required")
    try:
        length = int(text)
    except ValueError:
        length = -1
    if length < 0:
        raise HttpError(400, f"bad Content-Length {text!r}")
    if length > cap:
        raise HttpError(413, f"body of {length} bytes exceeds the {cap}-byte cap")
    return length


def json_object(raw: bytes) -> Mapping[str, Any]:
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


def refused(where: str, status: int, body: Mapping[str, Any], problem: str = "") -> TransportError:
    """The error an answer other than a 2xx with a JSON object means.

    Args:
        where: the request, ``METHOD http://host:port/path``.
        status: the answer's HTTP status.
        body: its JSON object (empty when it had none, or not one).
        problem: what was wrong with a body that is not a JSON object (``""`` otherwise).

    Returns:
        ``Unauthorized`` for 401 (a missing or wrong job token), ``WrongJob`` for 403 (the peer serves
        another job), else a ``TransportError`` with the status and the peer's ``error`` (or the problem).
    """
    said = body.get("error", "")
    if status == 401:
        return Unauthorized(f"{where}: 401 {said}", 401)
    if status == 403:
        return WrongJob(f"{where}: 403 {said}", 403)
    return TransportError(f"{where}: {problem}" if problem else f"{where}: {status} {said}", status)
