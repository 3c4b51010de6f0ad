"""Reading an HTTP/1.1 request head from bytes as they arrive, with limits. Standard library only.

The agent's server (``server.AgentServer``) reads every connection from one event loop, so a head
arrives in pieces of any size (a slow or hostile client may send it byte by byte). A
:class:`HeadReader` consumes complete lines as they come and keeps its place, so every byte is
scanned once; it enforces ``http.server``'s limits while the head is still arriving: a line longer
than :data:`MAX_LINE` is refused as soon as that many bytes came without its end, and more than
:data:`MAX_HEADERS` header lines are refused. The format is RFC 9112's: a request line
``METHOD target HTTP/1.x`` and ``Name: value`` lines up to an empty line.
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Optional

from runtime.agent.errors import HttpError

MAX_LINE = 64 * 1024
"""Longest request line or header line accepted, bytes, end of line included (as ``http.server``'s ``_MAXLINE``)."""
MAX_HEADERS = 100
"""Most header lines accepted per request (as ``http.client``'s ``_MAXHEADERS``)."""


class Headers:
    """A request's headers, names case-insensitive: ``get(name)`` as on ``email.message.Message``."""

    def __init__(self, fields: Dict[str, str]) -> None:
        self._fields = fields

    def get(self, name: str, default: Optional[str] = None) -> Optional[str]:
        """The value of header ``name`` (any case), or ``default`` when the request has none."""
        return self._fields.get(name.lower(), default)


class RequestHead(NamedTuple):
    """A parsed request head.

    Attributes:
        method: the request method, as sent.
        target: the request target (path and query), as sent.
        keep_alive: whether the protocol version keeps the connection open by default (HTTP/1.1).
        headers: the header fields.
    """

    method: str
    target: str
    keep_alive: bool
    headers: Headers


class HeadReader:
    """Takes one request head at a time off the front of a connection's input buffer."""

    def __init__(self) -> None:
        self._scanned = 0
        self._request: Optional[tuple[str, str, bool]] = None
        self._fields: Dict[str, str] = {}
        self._lines = 0

    def _reset(self) -> None:
        """Ready for the connection's next request."""
        self._scanned, self._request, self._fields, self._lines = 0, None, {}, 0

    def take(self, buffer: bytearray) -> Optional[RequestHead]:
        """The head at the start of ``buffer`` once it is complete (its bytes are removed from
        ``buffer``), or ``None`` while more is needed (call again with the same buffer, grown).

        Raises:
            HttpError: 400 for a malformed request or header line, 414 for a request line and 431
                for a header line longer than :data:`MAX_LINE`, 431 for more than :data:`MAX_HEADERS`
                header lines. The connection cannot carry another request after one.
        """
        while True:
            end = buffer.find(b"\n", self._scanned)
            if end < 0:
                if len(buffer) - self._scanned > MAX_LINE:
                    raise self._too_long()
                return None
            line = bytes(buffer[self._scanned:end + 1])
            self._scanned = end + 1
            if len(line) > MAX_LINE:
                raise self._too_long()
            if self._request is None:
                self._request = _request_line(line)
                continue
            if line in (b"\r\n", b"\n"):
                method, target, keep_alive = self._request
                head = RequestHead(method, target, keep_alive, Headers(self._fields))
                del buffer[:self._scanned]
                self._reset()
                return head
            self._lines += 1
            if self._lines > MAX_HEADERS:
                raise HttpError(431, f"more than {MAX_HEADERS} header lines")
            name, sep, value = line.decode("latin-1").partition(":")
            if not sep or not name or name != name.strip():
                raise HttpError(400, f"malformed header line {line[:80]!r}")
            self._fields[name.lower()] = value.strip()

    def _too_long(self) -> HttpError:
        if self._request is None:
            return HttpError(414, "request line too long")
        return HttpError(431, "header line too long")


def _request_line(line: bytes) -> tuple[str, str, bool]:
    """``(method, target, keep-alive by default)`` of ``METHOD target HTTP/1.x``.

    Raises:
        HttpError: 400 for anything else.
    """
    parts = line.decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HttpError(400, f"malformed request line {line[:80]!r}")
    return parts[0], parts[1], parts[2] != "HTTP/1.0"
