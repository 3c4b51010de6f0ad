"""One client connection of the agent's server as its event loop keeps it: buffers, the parsed
head, the request in flight and its hang-up watchers. Standard library only."""

from __future__ import annotations

import socket
import threading
import traceback
from typing import Callable, NamedTuple, Optional, Union

from runtime.agent.net.loop import EventLoop, Timer
from runtime.agent.net.messages import Handler, Response
from runtime.agent.net.requesthead import HeadReader


class Call(NamedTuple):
    """A request for a handler: what to run once the body has arrived."""

    method: str
    path: str
    handler: Handler
    has_body: bool


class Pending(NamedTuple):
    """A parsed head's next step: ``length`` body bytes to read (dropped as they come if ``discard``: a body
    the answer does not need is never held), then ``then`` (a fixed answer, or a handler to call), then the
    connection stays open if ``keep_alive``."""

    length: int
    then: Union[Response, Call]
    keep_alive: bool
    discard: bool = False


REQUEST_STALL = 30.0
"""Seconds a client may send nothing in the middle of a request (its head or body begun, not whole) before the
server answers 408 and closes the connection; an idle kept-alive connection between requests is kept."""


class Connection:
    """One client connection's state, owned by the loop (``gone`` is read by handler threads)."""

    def __init__(self, sock: socket.socket, peer: str) -> None:
        self.sock = sock
        self.peer = peer
        self.inbuf = bytearray()
        self.out = bytearray()
        self.head = HeadReader()
        self.pending: Optional[Pending] = None
        self.busy = False
        """A handler runs for this connection's request in a pool."""
        self.closing = False
        """Close once :attr:`out` is sent."""
        self.eof = False
        self.closed = False
        self.events = 0
        self.read_at = 0.0
        """When the loop last read bytes from the client (its clock)."""
        self._stall: Optional[Timer] = None
        self.watcher: Callable[[int], None] = lambda _mask: None
        """What the loop calls when the socket is ready (the server's event handler for it)."""
        self.gone = threading.Event()
        """Set when the client hangs up (end of stream, a reset) or the connection closes: ``Request.hung_up``."""
        self._watchers: list[Callable[[], None]] = []
        self._watch_lock = threading.Lock()

    def drop_unneeded(self, pending: Pending) -> Pending:
        """Drop what has come of a body ``pending``, this connection's pending step, does not need
        (``Pending.discard``); the pending step after that, with what is left to come (loop thread only)."""
        if pending.discard and pending.length:
            dropped = min(len(self.inbuf), pending.length)
            del self.inbuf[:dropped]
            pending = self.pending = pending._replace(length=pending.length - dropped)
        return pending

    def mid_request(self) -> bool:
        """Whether the client is in the middle of sending a request: begun, not whole, nothing running for it."""
        return not (self.busy or self.out or self.eof or self.closed) and (self.pending is not None or bool(self.inbuf))

    def time_stall(self, loop: EventLoop, stalled: Callable[[], None], fired: bool = False) -> None:
        """Keep a timer on ``loop`` due :data:`REQUEST_STALL` s after the last byte read (:attr:`read_at`) while
        :meth:`mid_request`; ``stalled`` runs when it comes due with nothing read since (loop thread only)."""
        if fired:
            self._stall = None
        if not self.mid_request():
            if self._stall is not None:
                self._stall.cancel()
                self._stall = None
        elif fired and loop.now() >= self.read_at + REQUEST_STALL:
            stalled()
        elif self._stall is None:
            self._stall = loop.call_at(self.read_at + REQUEST_STALL, lambda: self.time_stall(loop, stalled, True))

    def watch_hang_up(self, watcher: Callable[[], None]) -> None:
        """``Request.on_hang_up`` (any thread)."""
        with self._watch_lock:
            if not self.gone.is_set():
                self._watchers.append(watcher)
                return
        watcher()

    def answered(self) -> None:
        """The running request is answered: its hang-up watchers are done (loop)."""
        with self._watch_lock:
            self._watchers.clear()

    def hang_up(self) -> None:
        """The client went: tell the running request (loop)."""
        with self._watch_lock:
            if self.gone.is_set():
                return
            self.gone.set()
            watchers, self._watchers = self._watchers, []
        for watcher in watchers:
            try:
                watcher()
            except Exception:  # a watcher's bug must not end the loop
                traceback.print_exc()
