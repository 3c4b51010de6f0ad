"""Many HTTP exchanges at once from one thread, over kept-alive connections. Standard library only.

Fan-out sends one request per child and must notice the first failure at once, in whatever order the
answers come. A thread per child costs a thread start and GIL hand-offs per request and a bounded
pool of them stalls long calls behind each other; instead one thread drives every exchange of a
batch with ``selectors`` (non-blocking connect, send, receive), as an event loop would. Connections
are kept alive between calls (HTTP/1.1, which the agent's server speaks), so a call costs no TCP
handshake, and ``TCP_NODELAY`` is set so small requests are not held back by Nagle's algorithm. An
idle connection is checked before reuse (readable while idle means its server closed it), as urllib3
does. Nothing is ever sent twice: a failed exchange is reported, not retried (a single exchange, made
with ``retry_stale``, is sent once more on a new connection when a kept-alive one ends before any byte
of the answer, as one the peer closed while idle does: ``flight.Stepper``). A batch runs on the agent's event
loop (``loop.EventLoop``), beside the server's connections: started there (:meth:`MultiplexBatch.start`,
from the loop's thread), or from another thread that waits for its answers while the loop does the
I/O (:meth:`MultiplexBatch.run` on a batch with a ``home`` loop). Without a loop, :meth:`run` drives
it in the calling thread.

Each exchange is a ``flight.Flight`` taken a step at a time by a ``flight.Stepper``.
``transport.HttpTransport`` runs its batches and its single exchanges with this.
"""

from __future__ import annotations

import contextlib
import functools
import queue
import selectors
import socket
import time
from typing import Any, Callable, Optional, Sequence

from runtime.agent.net.flight import Flight, Stepper, numeric
from runtime.agent.net.keepalive import ConnectionPool
from runtime.agent.net.loop import EventLoop, Timer
from runtime.agent.net.peer import Answer, Exchange

LOOP_CHECK = 1.0
"""Seconds between a waiting thread's looks at whether its batch's loop still serves."""
LOOP_GRACE = 5.0
"""Seconds past its deadline a thread waits for a loop that has not answered (a stalled loop)."""


class _OnLoop:
    """A batch's flights watched by an ``EventLoop``: each ready socket steps its flight."""

    def __init__(self, loop: EventLoop, step: Callable[[Flight, int], None]) -> None:
        self._loop = loop
        self._step = step

    def register(self, fileobj: Any, events: int, data: Any = None) -> None:
        self._loop.register(fileobj, events, lambda mask: self._step(data, mask))

    def modify(self, fileobj: Any, events: int, data: Any = None) -> None:
        self._loop.modify(fileobj, events, lambda mask: self._step(data, mask))

    def unregister(self, fileobj: Any) -> None:
        self._loop.unregister(fileobj)


class MultiplexBatch:
    """A set of exchanges run concurrently by :meth:`run` in one thread; :meth:`abort` from any thread
    (a ``peer.Batch``).

    Args:
        pool: connections to reuse and return.
        exchanges: the requests.
        deadline: monotonic time (of ``clock``) by which answers must have arrived, or ``None`` for no limit.
        clock: monotonic clock, seconds.
        home: the agent's event loop: :meth:`run` from another thread has the loop do the I/O (while the
            loop serves; otherwise, and for host names, which the loop does not look up, the calling
            thread drives the batch itself).
        retry_stale: send an exchange once more, on a new connection, when the kept-alive connection it
            was sent on turns out to have been closed by the peer while idle (ended or reset before any
            byte of the answer): for single exchanges, as ``HttpTransport.exchange`` promises.
    """

    def __init__(
        self,
        pool: ConnectionPool,
        exchanges: Sequence[Exchange],
        deadline: Optional[float] = None,
        clock: Callable[[], float] = time.monotonic,
        *,
        home: Optional[EventLoop] = None,
        retry_stale: bool = False,
    ) -> None:
        self._pool = pool
        self._exchanges = list(exchanges)
        self._deadline = deadline
        self._clock = clock
        self._home = home
        self._retry_stale = retry_stale
        self._stepper = Stepper(pool, retry_stale=retry_stale)
        self._waiting: Optional[queue.SimpleQueue[Optional[Answer]]] = None
        self._wake: Optional[tuple[socket.socket, socket.socket]] = None  # run in this thread only: its wake-up
        self._aborted = False
        self._loop: Optional[EventLoop] = None
        self._on_loop: Optional[_OnLoop] = None
        self._flights: dict[int, Flight] = {}
        self._timer: Optional[Timer] = None
        self._on_answer: Callable[[Answer], None] = lambda _answer: None

    def abort(self) -> None:
        """Stop :meth:`run` at once; exchanges in flight are dropped (their connections closed). A batch
        :meth:`start` ed on a loop is aborted on the loop (at once when called there)."""
        self._aborted = True
        if self._waiting is not None:
            self._waiting.put(None)
        if self._loop is not None:
            if self._loop.in_loop():
                self._drop_all()
            else:
                self._loop.call_soon(self._drop_all)
            return
        if self._wake is not None:
            with contextlib.suppress(OSError):
                self._wake[1].send(b"x")

    def start(self, loop: EventLoop, on_answer: Callable[[Answer], None]) -> None:
        """Run on ``loop`` (call from its thread): send every request without blocking and return; call
        ``on_answer`` on the loop once per exchange as answers complete, unanswered ones at the deadline
        (``status=None, timed_out=True``); nothing more after :meth:`abort`. Hosts must be IP addresses
        (a name lookup would block the loop): a name is answered with an error, not looked up.
        """
        self._loop, self._on_answer = loop, on_answer
        self._stepper = Stepper(self._pool, numeric_only=True, retry_stale=self._retry_stale)
        self._on_loop = watch = _OnLoop(loop, self._loop_step)
        early = []
        for index, exchange in enumerate(self._exchanges):
            flight = Flight(index, exchange, self._stepper.request(exchange))
            answer = self._stepper.start(flight, watch)
            if answer is None:
                self._flights[index] = flight
            else:
                early.append(answer)
        if self._flights and self._deadline is not None:  # the batch's clock's time, as the loop's
            self._timer = loop.call_at(loop.now() + self._deadline - self._clock(), self._expire)
        for answer in early:  # after start returns: the caller is set up to take them
            loop.call_soon(functools.partial(self._early, answer))

    def _early(self, answer: Answer) -> None:
        if not self._aborted:
            self._on_answer(answer)

    def _loop_step(self, flight: Flight, mask: int) -> None:
        if self._on_loop is None or flight.index not in self._flights:
            return
        answer = self._stepper.step(flight, mask, self._on_loop)
        if answer is not None:
            del self._flights[flight.index]
            if not self._flights and self._timer is not None:
                self._timer.cancel()
            if not self._aborted:
                self._on_answer(answer)

    def _expire(self) -> None:
        flights, self._flights = self._flights, {}
        for flight in flights.values():
            if self._on_loop is not None:
                self._stepper.drop(flight, self._on_loop)
        for flight in flights.values():
            if not self._aborted:
                self._on_answer(Answer(flight.index, None, error="no answer before the deadline", timed_out=True))

    def _drop_all(self) -> None:
        flights, self._flights = self._flights, {}
        if self._timer is not None:
            self._timer.cancel()
        for flight in flights.values():
            if self._on_loop is not None:
                self._stepper.drop(flight, self._on_loop)

    def run(self, on_answer: Callable[[Answer], None]) -> None:
        """Send every request and call ``on_answer`` (in this thread) once per exchange as answers complete.

        Returns when every exchange is answered, or at the deadline (each unanswered exchange is
        answered with ``status=None``), or on :meth:`abort` (nothing more is answered). With a ``home``
        loop that serves, the loop does the I/O and this thread only waits (every host an IP address).
        """
        home = self._home
        if home is not None and home.serving() and not home.in_loop() and all(
                numeric(e.host) for e in self._exchanges):
            self._run_on(home, on_answer)
        else:
            self._run_here(on_answer)

    def _run_here(self, on_answer: Callable[[Answer], None]) -> None:
        """:meth:`run` with the I/O in this thread."""
        def told(answer: Answer) -> None:
            if not self._aborted:  # nothing is answered after an abort, from whichever thread it came
                on_answer(answer)

        if self._aborted:
            return
        selector = selectors.DefaultSelector()
        flights: dict[int, Flight] = {}
        self._wake = wake_r, wake_w = socket.socketpair()
        try:
            selector.register(wake_r, selectors.EVENT_READ, None)
            for index, exchange in enumerate(self._exchanges):
                flight = Flight(index, exchange, self._stepper.request(exchange))
                answer = self._stepper.start(flight, selector)
                if answer is None:
                    flights[index] = flight
                else:
                    told(answer)
            while flights and not self._aborted:
                timeout = None if self._deadline is None else self._deadline - self._clock()
                if timeout is not None and timeout <= 0:
                    break
                for key, mask in selector.select(timeout):
                    if key.data is None:
                        return
                    flight = key.data
                    answer = self._stepper.step(flight, mask, selector)
                    if answer is not None:
                        del flights[flight.index]
                        told(answer)
            for flight in list(flights.values()):
                self._stepper.drop(flight, selector)
                told(Answer(flight.index, None, error="no answer before the deadline", timed_out=True))
            flights.clear()
        finally:
            for flight in flights.values():
                self._stepper.drop(flight, selector)
            selector.close()
            wake_r.close()
            wake_w.close()

    def _run_on(self, loop: EventLoop, on_answer: Callable[[Answer], None]) -> None:
        """:meth:`run` with the I/O on ``loop``: the answers come back to this thread through a queue.
        Should the loop stop (or stall past the deadline by :data:`LOOP_GRACE`), the exchanges not yet
        answered are answered with an error."""
        waiting: queue.SimpleQueue[Optional[Answer]] = queue.SimpleQueue()
        self._waiting = waiting
        left = None if self._deadline is None else self._deadline - self._clock()
        loop.call_soon(lambda: self._start_on(loop, waiting))
        until = None if left is None else time.monotonic() + left + LOOP_GRACE
        pending = set(range(len(self._exchanges)))
        while pending and not self._aborted:
            slice_ = LOOP_CHECK if until is None else min(LOOP_CHECK, until - time.monotonic())
            try:
                answer = waiting.get(timeout=max(0.0, slice_))
            except queue.Empty:
                if loop.serving() and (until is None or time.monotonic() < until):
                    continue
                break
            if answer is None or self._aborted:
                continue  # an abort's wake-up, or an answer that came with it: the loop's condition ends it
            pending.discard(answer.index)
            on_answer(answer)
        if pending and not self._aborted:
            stopped = not loop.serving()
            self.abort()
            if loop.closed():  # nothing runs there any more: this thread closes the connections
                self._drop_all()
            why = "the agent's event loop stopped" if stopped else "no answer before the deadline"
            for index in sorted(pending):
                on_answer(Answer(index, None, error=why, timed_out=not stopped))

    def _start_on(self, loop: EventLoop, waiting: queue.SimpleQueue[Optional[Answer]]) -> None:
        """On the loop: start, unless aborted meanwhile (an abort that came before the loop was set
        could not reach the flights, so they are dropped here)."""
        if self._aborted or not loop.serving():
            return
        try:
            self.start(loop, waiting.put)
        except Exception as exc:  # a bug: the waiting thread is told, not left to its deadline
            self._drop_all()
            for index in range(len(self._exchanges)):
                waiting.put(Answer(index, None, error=f"internal: the exchange could not start: {exc!r}"))
            raise
        if self._aborted:
            self._drop_all()
