"""Idle kept-alive connections per peer, shared by every exchange and batch of one agent's peer
client (``transport.HttpTransport``, ``multiplex.MultiplexBatch``). Standard library only."""

from __future__ import annotations

import select
import socket
import threading
from typing import Optional

MAX_IDLE_PER_PEER = 8
"""Idle connections kept per ``(host, port)``."""


class ConnectionPool:
    """Idle keep-alive connections per peer, shared by every batch of one agent (thread-safe).

    Args:
        token: the job token, sent as a bearer token on every request.
        job: the job id, sent with it on every request (``contract.JOB_HEADER``).
    """

    def __init__(self, token: str, job: str) -> None:
        self.token = token
        self.job = job
        self._idle: dict[tuple[str, int], list[socket.socket]] = {}
        self._lock = threading.Lock()
        self.sent = 0
        """Requests sent so far (counted when a request's first byte is written; a request sent again on a
        new connection counts again)."""

    def checkout(self, host: str, port: int) -> Optional[socket.socket]:
        """An idle connection to ``host:port`` that is still open, or ``None``."""
        while True:
            with self._lock:
                idle = self._idle.get((host, port))
                if not idle:
                    return None
                sock = idle.pop()
            if not _readable(sock, 0.0):
                return sock
            sock.close()

    def checkin(self, host: str, port: int, sock: socket.socket) -> None:
        """Return a connection whose last response was read completely."""
        with self._lock:
            idle = self._idle.setdefault((host, port), [])
            if len(idle) < MAX_IDLE_PER_PEER:
                idle.append(sock)
                return
        sock.close()

    def count_sent(self) -> None:
        """Count one request sent."""
        with self._lock:
            self.sent += 1

    def close(self) -> None:
        """Close every idle connection."""
        with self._lock:
            idle, self._idle = self._idle, {}
        for socks in idle.values():
            for sock in socks:
                sock.close()


def _readable(sock: socket.socket, timeout: float) -> bool:
    """Whether ``sock`` is readable (data, end of stream or an error) within ``timeout`` seconds.

    ``poll``, not ``select``: ``select`` cannot watch descriptors numbered 1024 or more, which an agent
    with a thousand peers has.
    """
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(timeout * 1000))
