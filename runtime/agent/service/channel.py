"""Framed JSON messages over a stream socket: the private channel between an agent and each of its
service worker processes. Standard library only.

A frame is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON (an object), the
framing ``multiprocessing.connection`` uses. The socket is one end of a ``socketpair`` the agent
hands to the worker at spawn, so only the two processes can speak on it.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import struct
import threading
import time
from typing import Any, Mapping, Optional

from runtime.agent.errors import ChannelClosed

MAX_FRAME = 1 << 30
"""Largest frame accepted, bytes; a longer length prefix means a corrupt stream."""
_HEADER = struct.Struct(">I")


class Channel:
    """Send and receive JSON objects over a connected stream socket.

    One thread may receive while others send; sends are serialised by a lock.

    Args:
        sock: a connected, blocking stream socket; the channel owns it.
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._send_lock = threading.Lock()
        self._buffer = bytearray()
        self._poller = select.poll()  # not select(): it cannot watch descriptors numbered 1024 or more
        self._poller.register(sock, select.POLLIN)

    def fileno(self) -> int:
        """The socket's file descriptor (for ``select``)."""
        return self._sock.fileno()

    def send(self, message: Mapping[str, Any]) -> None:
        """Send one object.

        Raises:
            TypeError, ValueError: ``message`` is not JSON-serialisable; nothing was sent.
            ChannelClosed: the other end has gone.
        """
        data = json.dumps(message, separators=(",", ":")).encode()
        with self._send_lock:
            try:
                self._sock.sendall(_HEADER.pack(len(data)) + data)
            except OSError as exc:
                raise ChannelClosed(f"channel closed while sending: {exc}") from exc

    def recv(self, timeout: Optional[float] = None) -> Optional[dict[str, Any]]:
        """Receive one object, waiting up to ``timeout`` seconds (``None``: forever).

        Returns:
            The object, or ``None`` when no whole frame arrived in time (a partial one is kept).

        Raises:
            ChannelClosed: end of stream, a socket error, or a corrupt frame.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            message = self._take()
            if message is not None:
                return message
            wait = None if deadline is None else max(0.0, deadline - time.monotonic()) * 1000
            try:
                if not self._poller.poll(wait):
                    return None
                chunk = self._sock.recv(1 << 16)
            except (OSError, ValueError) as exc:
                raise ChannelClosed(f"channel closed: {exc}") from exc
            if not chunk:
                raise ChannelClosed("end of stream")
            self._buffer += chunk

    def _take(self) -> Optional[dict[str, Any]]:
        if len(self._buffer) < _HEADER.size:
            return None
        (length,) = _HEADER.unpack_from(self._buffer)
        if length > MAX_FRAME:
            self.close()
            raise ChannelClosed(f"corrupt stream: frame of {length} bytes")
        end = _HEADER.size + length
        if len(self._buffer) < end:
            return None
        raw = bytes(self._buffer[_HEADER.size:end])
        del self._buffer[:end]
        try:
            message = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            self.close()
            raise ChannelClosed(f"corrupt stream: {exc}") from exc
        if not isinstance(message, dict):
            self.close()
            raise ChannelClosed("corrupt stream: a frame that is not an object")
        return message

    def close(self) -> None:
        """Close the socket; safe to call more than once."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
