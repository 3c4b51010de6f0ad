"""Where a call's hop takes its steps: on the agent's event loop, or in the thread that waits for it.

A ``hop.Hop`` is a state machine: its steps (a child's answer, a rank's result, a cancel, a timer)
must run one at a time, in order. A :class:`LoopDriver` runs them on the agent's event loop
(``net.loop.EventLoop``), with the children's requests on the same loop (``MultiplexBatch.start``),
so a hop through a node costs no thread of its own; a :class:`ThreadDriver` runs them in the
calling thread until the hop is done, with the children's batch in a thread of its own, for a
transport that is not on a loop (the in-memory ``testbed.transport.FakeTransport``). Standard
library only.
"""

from __future__ import annotations

import heapq
import itertools
import queue
import threading
import time
from typing import Callable, Protocol

from runtime.agent.net.loop import EventLoop, Timer
from runtime.agent.net.multiplex import MultiplexBatch
from runtime.agent.net.peer import Answer, Batch

Step = Callable[[], None]


class Driver(Protocol):
    """Runs a hop's steps one at a time, in order."""

    def post(self, step: Step) -> None:
        """Run ``step`` soon (any thread)."""

    def at(self, when: float, step: Step) -> Timer:
        """Run ``step`` at time ``when`` of the hop's clock unless the timer is cancelled first (driver's steps)."""

    def start(self, batch: Batch, on_answer: Callable[[Answer], None]) -> None:
        """Send ``batch``'s requests; each answer is a step calling ``on_answer`` (driver's steps only)."""


class LoopDriver:
    """Steps on ``loop``, the agent's event loop; batches must be ``MultiplexBatch`` (``HttpTransport``'s).

    Args:
        loop: the loop of the agent's server.
        clock: the clock the hop's times are on (the agent's), seconds; :meth:`at` converts them to the loop's.
    """

    def __init__(self, loop: EventLoop, clock: Callable[[], float] = time.monotonic) -> None:
        self._loop = loop
        self._clock = clock

    def post(self, step: Step) -> None:
        """Run ``step`` on the loop (any thread)."""
        self._loop.call_soon(step)

    def at(self, when: float, step: Step) -> Timer:
        """A loop timer at ``when`` on the driver's clock."""
        return self._loop.call_at(self._loop.now() + when - self._clock(), step)

    def start(self, batch: Batch, on_answer: Callable[[Answer], None]) -> None:
        """Run ``batch`` on the loop.

        Raises:
            TypeError: ``batch`` cannot run on a loop (not a ``MultiplexBatch``).
        """
        if not isinstance(batch, MultiplexBatch):
            raise TypeError(f"a {type(batch).__name__} cannot run on the agent's event loop")
        batch.start(self._loop, on_answer)


class ThreadDriver:
    """Steps in the thread that calls :meth:`run_until`; posted from any thread.

    Args:
        clock: monotonic clock, seconds (timers; a fake one in tests: a timer is looked at whenever a
            step has run, and at least once per real second).
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._steps: queue.SimpleQueue[Step] = queue.SimpleQueue()
        self._timers: list[tuple[float, int, Timer]] = []
        self._order = itertools.count()

    def post(self, step: Step) -> None:
        """Queue ``step`` for :meth:`run_until` (any thread)."""
        self._steps.put(step)

    def at(self, when: float, step: Step) -> Timer:
        """A timer :meth:`run_until` fires."""
        timer = Timer(step)
        heapq.heappush(self._timers, (when, next(self._order), timer))
        return timer

    def start(self, batch: Batch, on_answer: Callable[[Answer], None]) -> None:
        """Run ``batch`` in a thread of its own, its answers posted as steps."""
        threading.Thread(target=batch.run, args=(lambda answer: self.post(lambda: on_answer(answer)),),
                         name="fanout", daemon=True).start()

    def run_until(self, done: Callable[[], bool]) -> None:
        """Run steps and due timers in this thread until ``done()``."""
        while True:
            while self._timers and (self._timers[0][2].cancelled or self._timers[0][0] <= self._clock()):
                _, _, timer = heapq.heappop(self._timers)
                if not timer.cancelled:
                    timer.callback()
            if done():
                return
            wait = 1.0 if not self._timers else min(1.0, max(0.0, self._timers[0][0] - self._clock()))
            try:
                step = self._steps.get(timeout=wait)
            except queue.Empty:
                continue
            step()
