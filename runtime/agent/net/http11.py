"""HTTP/1.1 framing for the agent's own clients: the request bytes, and the response head parsed.

Agents talk only to agents (``transport.AgentServer``), whose answers always carry
``Content-Length`` and a JSON body, so a client needs no more of HTTP than this: no chunked bodies, no
redirects, no TLS. ``http.client`` would bring the ``email`` package's parser and ``ssl`` into every
agent, worker start and heartbeat for nothing. Standard library only.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from runtime.agent import contract
from runtime.agent.spec.address import host_port

MAX_RESPONSE_HEAD = 64 * 1024
"""Bytes of response head accepted before the exchange is failed."""


def request_bytes(method: str, path: str, host: str, port: int, token: str, job: str, body: Optional[bytes]) -> bytes:
    """One request, head and body, ready to send.

    Args:
        method: HTTP method.
        path: route.
        host: the peer's address, for the ``Host`` header (an IPv6 address bracketed there).
        port: the peer's TCP port.
        token: the job token, sent as ``Authorization: Bearer <token>``.
        job: the job id, sent as ``contract.JOB_HEADER``.
        body: the encoded JSON body, or ``None``.
    """
    head = (f"{method} {path} HTTP/1.1\r\nHost: {host_port(host, port)}\r\n"
            f"{contract.AUTH_HEADER}: {contract.AUTH_SCHEME} {token}\r\n{contract.JOB_HEADER}: {job}\r\n")
    if body is None:
        return (head + "\r\n").encode()
    head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


class ResponseHead(NamedTuple):
    """A parsed response head.

    Attributes:
        status: the HTTP status.
        body_start: offset of the body in the bytes received.
        length: body length, bytes (``Content-Length``; 0 without one).
        keep_alive: whether the connection can carry another request.
    """

    status: int
    body_start: int
    length: int
    keep_alive: bool


def parse_head(data: bytes | bytearray) -> Optional[ResponseHead]:
    """The response head at the start of ``data``, or ``None`` while it is incomplete.

    Raises:
        ValueError: the head is malformed or longer than :data:`MAX_RESPONSE_HEAD`.
    """
    end = data.find(b"\r\n\r\n")
    if end < 0:
        if len(data) > MAX_RESPONSE_HEAD:
            raise ValueError("an oversized response head")
        return None
    head = bytes(data[:end + 2]).lower()
    try:
        if not head.startswith(b"http/1."):
            raise ValueError
        status = int(head[9:12])
        at = head.find(b"\r\ncontent-length:")
        length = int(head[at + 17:head.index(b"\r\n", at + 17)]) if at >= 0 else 0
    except ValueError:
        raise ValueError("a malformed response head") from None
    keep_alive = head.startswith(b"http/1.1 ") and b"\r\nconnection: close\r\n" not in head
    return ResponseHead(status, end + 4, length, keep_alive)
