"""The coordinator's watch on its direct reporters' agent ports: a killed agent is noticed at once.

A node's heartbeats say it is alive only every beat cap, so silence alone needs about two TTL
thirds to suspect a node (``coordinator.Coordinator.tick``). A killed agent says more, and at once:
its kernel closes its sockets, so a connection to its agent port ends (end of stream or a reset),
and a new one is refused. :class:`Watch` holds one idle TCP connection to the agent port of each
node :meth:`Coordinator.watched` names (those whose heartbeats come to the coordinator directly) and
watches them all from one thread with ``selectors``; a connection that ends, is reset or is refused
reports the node to ``gone``, which has the coordinator probe it now (``Coordinator.suspect``). The
probe confirms the loss (``POST /probe`` refused: the agent is gone; answered: it is alive, only its
connection ended), so no node is lost on this signal alone and the fencing rules (``lease``) hold.

Nothing is ever sent on a watch connection: it costs the watched agent's server one idle
connection and no request (its ``requests_served`` is unchanged). A SIGSTOPped agent's kernel keeps
its connections open; that one is found by its silence. Standard library only.
"""

from __future__ import annotations

import contextlib
import errno
import os
import selectors
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from runtime.agent.world import Node


@dataclass
class _Watched:
    """One watched node: its connection (``None`` until the next attempt) and when to try again."""

    node: Node
    sock: Optional[socket.socket] = None
    connecting: bool = False
    retry_at: float = 0.0


class Watch:
    """Idle connections to nodes' agent ports, watched from one thread.

    Args:
        gone: called (from the watch thread) with a node and why its connection says its agent is gone:
            refused, reset, or closed by the node's side.
        retry_after: seconds before a node whose connection failed is connected again (while it is still
            watched: its probe found it alive, or is under way).
        clock: monotonic clock, seconds.
    """

    def __init__(self, gone: Callable[[Node, str], None], retry_after: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._gone = gone
        self._retry_after = retry_after
        self._clock = clock
        self._lock = threading.Lock()
        self._wanted: tuple[Node, ...] = ()
        self._closed = False
        self._thread: Optional[threading.Thread] = None
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)

    def follow(self, nodes: Sequence[Node]) -> None:
        """Watch exactly ``nodes`` from now on (their connections are opened, the others' closed).
        Cheap when ``nodes`` is what it was; the watch thread starts at the first non-empty set."""
        wanted = tuple(nodes)
        with self._lock:
            if wanted == self._wanted or self._closed:
                return
            self._wanted = wanted
            if self._thread is None and wanted:
                self._thread = threading.Thread(target=self._run, name="watch", daemon=True)
                self._thread.start()
        self._poke()

    def close(self) -> None:
        """Stop watching and close every connection (waits briefly for the thread)."""
        with self._lock:
            self._closed = True
            thread = self._thread
        self._poke()
        if thread is not None:
            thread.join(timeout=2.0)
        else:
            self._wake_r.close()
            self._wake_w.close()

    def _poke(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    # --- the watch thread ----------------------------------------------------------------------

    def _run(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self._wake_r, selectors.EVENT_READ, None)
        watched: dict[tuple[int, str, int], _Watched] = {}
        try:
            while True:
                with self._lock:
                    if self._closed:
                        return
                    wanted = self._wanted
                self._reconcile(watched, wanted, selector)
                for key, mask in selector.select(self._timeout(watched)):
                    if key.data is None:
                        with contextlib.suppress(BlockingIOError):
                            self._wake_r.recv(4096)
                        continue
                    self._event(key.data, mask, selector)
        finally:
            for entry in watched.values():
                self._drop(entry, selector)
            selector.close()
            self._wake_r.close()
            self._wake_w.close()

    def _timeout(self, watched: dict[tuple[int, str, int], _Watched]) -> Optional[float]:
        """Seconds until the next reconnection is due, or ``None`` (wait for a change)."""
        due = [w.retry_at for w in watched.values() if w.sock is None]
        return max(0.0, min(due) - self._clock()) if due else None

    def _reconcile(self, watched: dict[tuple[int, str, int], _Watched], wanted: tuple[Node, ...],
                   selector: selectors.BaseSelector) -> None:
        """Close what is no longer wanted; connect what is wanted and due."""
        keys = {(n.node_id, n.addr, n.port): n for n in wanted}
        for key in [k for k in watched if k not in keys]:
            self._drop(watched.pop(key), selector)
        now = self._clock()
        for key, node in keys.items():
            entry = watched.setdefault(key, _Watched(node))
            if entry.sock is None and now >= entry.retry_at:
                self._connect(entry, selector)

    def _connect(self, entry: _Watched, selector: selectors.BaseSelector) -> None:
        node = entry.node
        try:
            family, kind, proto, _, address = socket.getaddrinfo(node.addr, node.port, type=socket.SOCK_STREAM)[0]
            sock = socket.socket(family, kind, proto)
        except OSError:
            entry.retry_at = self._clock() + self._retry_after  # a name that does not resolve: heartbeats decide
            return
        sock.setblocking(False)
        code = sock.connect_ex(address)
        if code not in (0, errno.EINPROGRESS, errno.EAGAIN, errno.EWOULDBLOCK):
            sock.close()
            self._lost(entry, f"its agent port refused a connection ({os.strerror(code)})"
                       if code == errno.ECONNREFUSED else "")
            return
        entry.sock, entry.connecting = sock, True
        selector.register(sock, selectors.EVENT_WRITE, entry)

    def _event(self, entry: _Watched, mask: int, selector: selectors.BaseSelector) -> None:
        sock = entry.sock
        if sock is None:
            return
        if entry.connecting:
            code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                self._drop(entry, selector)
                self._lost(entry, f"its agent port refused a connection ({os.strerror(code)})"
                           if code == errno.ECONNREFUSED else "")
                return
            entry.connecting = False
            selector.modify(sock, selectors.EVENT_READ, entry)
            return
        try:
            data = sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._drop(entry, selector)
            self._lost(entry, f"its agent port's connection was reset ({exc.strerror or exc})")
            return
        if not data:
            self._drop(entry, selector)
            self._lost(entry, "its agent closed the coordinator's connection to its agent port")
        # Bytes on a connection nothing was asked on (a server's notice before it closes it): read,
        # and keep watching for the end.

    def _lost(self, entry: _Watched, reason: str) -> None:
        """The connection failed: report the node (``reason`` empty: a failure that says nothing of its
        agent, e.g. no route, left to its heartbeats), and try again after ``retry_after``."""
        entry.retry_at = self._clock() + self._retry_after
        if reason:
            self._gone(entry.node, reason)

    @staticmethod
    def _drop(entry: _Watched, selector: selectors.BaseSelector) -> None:
        sock, entry.sock = entry.sock, None
        if sock is None:
            return
        with contextlib.suppress(KeyError, ValueError):
            selector.unregister(sock)
        sock.close()
