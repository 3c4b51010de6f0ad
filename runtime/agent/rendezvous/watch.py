"""A watch on agent ports: the coordinator's on its direct reporters, a tree parent's on its children. A killed
agent is noticed at once.

A node's heartbeats say it is alive only every beat cap, so silence alone needs about two TTL
thirds to suspect a node (``coordinator.Coordinator.tick``). A killed agent says more, and at once:
its kernel closes its sockets, so a connection to its agent port ends (end of stream or a reset),
and a new one is refused. :class:`Watch` holds one idle TCP connection to the agent port of each
node it follows (the coordinator: those :meth:`Coordinator.watched` names, whose heartbeats come to it
directly; a tree parent: its tree children, ``Heartbeats.children``) and watches them all on the
agent's event loop (``net.loop.EventLoop``, beside its server's connections; on a loop of its own,
one thread, when it has none); a connection that ends, is reset or is refused reports the node to
``gone``: the coordinator probes it now (``Coordinator.suspect``), a tree parent passes the suspicion
up with a beat sent at once (``suspicions``). The probe confirms the loss (``POST /probe`` refused:
the agent is gone; answered: it is alive, only its connection ended), so no node is lost on this
signal alone and the fencing rules (``lease``) hold.

Nothing is ever sent on a watch connection: it costs the watched agent's server one idle
connection and no request (its ``requests_served`` is unchanged). A SIGSTOPped agent's kernel keeps
its connections open; that one is found by its silence. Standard library only.
"""

from __future__ import annotations

import errno
import os
import selectors
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from runtime.agent.net.flight import numeric
from runtime.agent.net.loop import EventLoop, Timer
from runtime.agent.world import Node

Key = tuple[int, str, int]


@dataclass
class _Watched:
    """One watched node: its connection (``None`` until the next attempt) and when to try again."""

    node: Node
    sock: Optional[socket.socket] = None
    connecting: bool = False
    retry_at: float = 0.0


class Watch:
    """Idle connections to nodes' agent ports, watched on an event loop.

    Args:
        gone: called (on the loop) with a node and why its connection says its agent is gone: refused,
            reset, or closed by the node's side. It must not block.
        retry_after: seconds before a node whose connection failed is connected again (while it is still
            watched: its probe found it alive, or is under way).
        clock: monotonic clock, seconds (of a loop of the watch's own).
        loop: the agent's event loop, looked up at the first :meth:`follow` (``None``, a loop that does not
            serve, or nodes known by host name: the watch runs a loop of its own in one thread). On the
            agent's loop, a node added later with a host name is not watched (a lookup would block the
            loop): its heartbeats and probes find it.
    """

    def __init__(self, gone: Callable[[Node, str], None], retry_after: float,
                 clock: Callable[[], float] = time.monotonic,
                 loop: Callable[[], Optional[EventLoop]] = lambda: None) -> None:
        self._gone = gone
        self._retry_after = retry_after
        self._clock = clock
        self._home = loop
        self._lock = threading.Lock()
        self._wanted: tuple[Node, ...] = ()
        self._closed = False
        self._loop: Optional[EventLoop] = None
        self._own: Optional[threading.Thread] = None
        self._flags = 0
        self._watched: dict[Key, _Watched] = {}
        self._timer: Optional[Timer] = None

    def follow(self, nodes: Sequence[Node]) -> None:
        """Watch exactly ``nodes`` from now on (their connections are opened, the others' closed).
        Cheap when ``nodes`` is what it was; the watch takes its loop at the first non-empty set."""
        wanted = tuple(nodes)
        with self._lock:
            if wanted == self._wanted or self._closed:
                return
            self._wanted = wanted
            if self._loop is None:
                if not wanted:
                    return
                self._loop = self._take_loop(wanted)
            loop = self._loop
        loop.call_soon(self._reconcile)

    def close(self) -> None:
        """Stop watching and close every connection (waits briefly for a loop of its own)."""
        with self._lock:
            self._closed = True
            loop, own = self._loop, self._own
        if loop is None:
            return
        loop.call_soon(self._drop_all)
        if own is not None:
            loop.call_soon(loop.stop)  # after the drop: posted work runs in order
            own.join(timeout=2.0)
        if loop.closed():
            self._drop_all()  # the loop may have ended before it took the drop: nothing else runs there now

    def _take_loop(self, wanted: tuple[Node, ...]) -> EventLoop:
        """The agent's loop, or (without one, or for nodes known by host name, which the agent's loop does not
        look up) a loop of the watch's own in one thread."""
        home = self._home()
        if home is not None and home.serving() and all(numeric(n.addr) for n in wanted):
            self._flags = socket.AI_NUMERICHOST
            return home
        own = EventLoop(self._clock)
        self._own = threading.Thread(target=own.run, args=(lambda: None,), name="watch", daemon=True)
        self._own.start()
        return own

    # --- on the loop ---------------------------------------------------------------------------

    def _reconcile(self) -> None:
        """Close what is no longer wanted; connect what is wanted and due; wake for the next due one."""
        with self._lock:
            if self._closed:
                return
            wanted = self._wanted
        keys = {(n.node_id, n.addr, n.port): n for n in wanted}
        for key in [k for k in self._watched if k not in keys]:
            self._drop(self._watched.pop(key))
        now = self._now()
        for key, node in keys.items():
            entry = self._watched.setdefault(key, _Watched(node))
            if entry.sock is None and now >= entry.retry_at:
                self._connect(entry)
        self._arm()

    def _arm(self) -> None:
        """A timer for the next reconnection due (none when every watched node has its connection)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        due = [w.retry_at for w in self._watched.values() if w.sock is None]
        if due and self._loop is not None:
            self._timer = self._loop.call_at(min(due), self._reconcile)

    def _connect(self, entry: _Watched) -> None:
        node = entry.node
        try:
            family, kind, proto, _, address = socket.getaddrinfo(node.addr, node.port, type=socket.SOCK_STREAM,
                                                                 flags=self._flags)[0]
            sock = socket.socket(family, kind, proto)
        except OSError:
            entry.retry_at = self._now() + self._retry_after  # a name that does not resolve: heartbeats decide
            return
        sock.setblocking(False)
        code = sock.connect_ex(address)
        if code not in (0, errno.EINPROGRESS, errno.EAGAIN, errno.EWOULDBLOCK):
            sock.close()
            self._lost(entry, f"its agent port refused a connection ({os.strerror(code)})"
                       if code == errno.ECONNREFUSED else "")
            return
        entry.sock, entry.connecting = sock, True
        if self._loop is not None:
            self._loop.register(sock, selectors.EVENT_WRITE, lambda mask: self._event(entry, mask))

    def _event(self, entry: _Watched, _mask: int) -> None:
        sock = entry.sock
        if sock is None or self._loop is None:
            return
        if entry.connecting:
            code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                self._drop(entry)
                self._lost(entry, f"its agent port refused a connection ({os.strerror(code)})"
                           if code == errno.ECONNREFUSED else "")
                self._arm()
                return
            entry.connecting = False
            self._loop.modify(sock, selectors.EVENT_READ, lambda mask: self._event(entry, mask))
            return
        try:
            data = sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._drop(entry)
            self._lost(entry, f"its agent port's connection was reset ({exc.strerror or exc})")
            self._arm()
            return
        if not data:
            self._drop(entry)
            self._lost(entry, "its agent closed the watch's connection to its agent port")
            self._arm()
        # Bytes on a connection nothing was asked on (a server's notice before it closes it): read,
        # and keep watching for the end.

    def _lost(self, entry: _Watched, reason: str) -> None:
        """The connection failed: report the node (``reason`` empty: a failure that says nothing of its
        agent, e.g. no route, left to its heartbeats), and try again after ``retry_after``."""
        entry.retry_at = self._now() + self._retry_after
        if reason:
            self._gone(entry.node, reason)

    def _now(self) -> float:
        return self._loop.now() if self._loop is not None else self._clock()

    def _drop_all(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        watched, self._watched = self._watched, {}
        for entry in watched.values():
            self._drop(entry)

    def _drop(self, entry: _Watched) -> None:
        sock, entry.sock = entry.sock, None
        if sock is None:
            return
        if self._loop is not None:
            self._loop.unregister(sock)
        sock.close()
