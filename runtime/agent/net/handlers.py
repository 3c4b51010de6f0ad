"""A small bounded pool of daemon threads for route handlers that block. Standard library only.

The agent's server runs on one event loop (``server.AgentServer``); a handler that waits (a call
running on the node's ranks, a vote waiting for the agent's decision, a long-polled output read)
runs here instead, so the loop keeps serving every other connection. Threads start only when a job
finds none idle, up to ``size``; past that, jobs wait their turn. The threads are daemons, unlike
``concurrent.futures``' workers, which the interpreter joins at exit: a call still waiting when the
agent exits must not hold the process.
"""

from __future__ import annotations

import queue
import threading
from typing import Callable


class HandlerPool:
    """At most ``size`` daemon threads running submitted jobs in submission order.

    Args:
        size: most threads, at least 1.
        name: the threads' name prefix (seen in ``py-spy`` and thread dumps).

    Raises:
        ValueError: ``size`` is below 1.
    """

    def __init__(self, size: int, name: str) -> None:
        if size < 1:
            raise ValueError(f"size={size} is invalid: a handler pool needs at least one thread")
        self._size = size
        self._name = name
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0
        """Threads waiting for a job, less the jobs queued for them and not yet taken."""
        self._backlog = 0
        """Jobs queued while every thread was busy and no more could start."""

    @property
    def threads(self) -> int:
        """Threads started so far (they never end)."""
        with self._lock:
            return self._threads

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` on an idle thread, a new one while fewer than ``size`` run, or when one is free.
        ``job`` must not raise (what it raises is printed by ``threading`` and lost)."""
        with self._lock:
            if self._idle > 0:
                self._idle -= 1
            elif self._threads < self._size:
                self._threads += 1
                threading.Thread(target=self._work, name=f"{self._name}-{self._threads}", daemon=True).start()
            else:
                self._backlog += 1
            self._jobs.put(job)

    def _work(self) -> None:
        while True:
            self._jobs.get()()
            with self._lock:
                if self._backlog:
                    self._backlog -= 1  # this thread takes one of them next
                else:
                    self._idle += 1
