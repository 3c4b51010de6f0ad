"""One agent's event loop: sockets watched with ``selectors``, work posted from other threads, timers.
Standard library only.

The agent's server (``server.AgentServer``) and its peer client (``multiplex.MultiplexBatch``: a
call's hops, and every exchange other threads ask of ``transport.HttpTransport``) both run on it, so
a call's hop through a node (its request, its children's requests and answers, the merge, its
answer) is served by one thread, whatever the number of connections, and a thread that sends a
heartbeat or a push only waits while the loop does its I/O. Nothing on the
loop may block: user work runs in the node's worker processes (or an executor's threads), which
hand results back with :meth:`EventLoop.call_soon`.
"""

from __future__ import annotations

import collections
import contextlib
import heapq
import itertools
import selectors
import socket
import threading
import time
import traceback
from typing import Callable, Optional

Watcher = Callable[[int], None]
"""Called on the loop with the ready events (``selectors.EVENT_READ`` / ``EVENT_WRITE`` bits)."""


class Timer:
    """A callback due at a monotonic time (kept beside it in its loop's heap); :meth:`cancel` (on the loop)
    before it runs drops it."""

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        """Do not run the callback (loop thread only)."""
        self.cancelled = True


class EventLoop:
    """A ``selectors`` loop run by one thread (:meth:`run`), fed from any thread (:meth:`call_soon`). What a
    callback raises (posted, timed, or a watched socket's) is a bug: printed, and the loop serves on (a watched
    socket whose callback raised is closed).

    Args:
        clock: monotonic clock, seconds (timers).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._posted: collections.deque[Callable[[], None]] = collections.deque()
        self._timers: list[tuple[float, int, Timer]] = []
        self._order = itertools.count()
        self._stopping = False
        self._serving = False
        self._closed = False
        self._thread: Optional[threading.Thread] = None

    def now(self) -> float:
        """The loop's clock (monotonic seconds): what :meth:`call_at` times are on."""
        return self._clock()

    def serving(self) -> bool:
        """Whether :meth:`run` is under way and not asked to stop (what is posted now will run)."""
        return self._serving and not self._stopping

    def closed(self) -> bool:
        """Whether :meth:`run` is ending or has ended: what is posted from now on may never run (what was
        posted before, even while it was stopping, runs); a caller that posts cleanup checks this after, and cleans
        up itself when it is set (the posted cleanup may run too: cleanups must bear running twice)."""
        return self._closed

    def watching(self) -> int:
        """How many sockets the loop watches now, its own wake-up socket not counted (diagnostics)."""
        return max(0, len(self._selector.get_map()) - 1) if self._serving else 0

    def in_loop(self) -> bool:
        """Whether the calling thread is the loop's."""
        return self._thread is threading.current_thread()

    def call_soon(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` on the loop, after what is already posted (any thread)."""
        self._posted.append(callback)
        if not self.in_loop():
            self.wake()

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        """Run ``callback`` on the loop at monotonic time ``when`` (loop thread only)."""
        timer = Timer(callback)
        heapq.heappush(self._timers, (when, next(self._order), timer))
        return timer

    def register(self, sock: socket.socket, events: int, watcher: Watcher) -> None:
        """Watch ``sock`` for ``events`` (loop thread only)."""
        self._selector.register(sock, events, watcher)

    def modify(self, sock: socket.socket, events: int, watcher: Watcher) -> None:
        """Change what ``sock`` is watched for (loop thread only)."""
        self._selector.modify(sock, events, watcher)

    def unregister(self, sock: socket.socket) -> None:
        """Stop watching ``sock`` (loop thread only; a socket not watched is ignored)."""
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(sock)

    def wake(self) -> None:
        """Interrupt the loop's wait (any thread)."""
        with contextlib.suppress(BlockingIOError, OSError):
            self._wake_w.send(b"x")

    def stop(self) -> None:
        """End :meth:`run` after the current step (any thread)."""
        self._stopping = True
        self.wake()

    def run(self, on_stop: Callable[[], None]) -> None:
        """Serve until :meth:`stop`, then call ``on_stop`` (still on the loop) and close the loop."""
        self._thread = threading.current_thread()
        self._serving = True
        try:
            while not self._stopping:
                for key, mask in self._selector.select(self._timeout()):
                    if key.data is None:
                        self._drain_wake()
                        continue
                    try:
                        key.data(mask)
                    except Exception:  # a watcher's bug: printed, and the loop serves on
                        traceback.print_exc()
                        with contextlib.suppress(KeyError, ValueError, OSError):  # else it comes back at once
                            self._selector.unregister(key.fileobj)
                            key.fileobj.close()  # type: ignore[union-attr]
                self._run_posted()
                self._run_due()
        finally:
            self._serving = False
            try:
                on_stop()
            finally:
                self._closed = True  # whatever on_stop raised: a waiter looks at this to stop waiting
            self._run_posted()  # what came while it stopped (a batch's or a watch's drop): run, not lost
            self._selector.close()
            self._wake_r.close()
            self._wake_w.close()

    def _timeout(self) -> Optional[float]:
        if self._posted:
            return 0.0
        while self._timers and self._timers[0][2].cancelled:
            heapq.heappop(self._timers)
        if not self._timers:
            return None
        return max(0.0, self._timers[0][0] - self._clock())

    def _drain_wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            while self._wake_r.recv(4096):
                pass

    def _run_posted(self) -> None:
        for _ in range(len(self._posted)):
            _guarded(self._posted.popleft())

    def _run_due(self) -> None:
        now = self._clock()
        while self._timers and self._timers[0][0] <= now:
            _, _, timer = heapq.heappop(self._timers)
            if not timer.cancelled:
                _guarded(timer.callback)


def _guarded(callback: Callable[[], None]) -> None:
    """Run ``callback``; what it raises is a bug, printed, and must not end the loop."""
    try:
        callback()
    except Exception:
        traceback.print_exc()
