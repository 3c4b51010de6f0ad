"""Waiting for any of several child processes to exit, without a polling interval.

The launcher supervises its agents until every one has exited; sleeping between looks would add up
to one interval to every job's end. :class:`ExitWatch` keeps one daemon thread per process blocked in
``Popen.wait()`` (portable, unlike Linux's pidfds), and wakes the supervisor the moment one returns.
Standard library only.
"""

from __future__ import annotations

import subprocess
import threading
from typing import Any


class ExitWatch:
    """Wakes :meth:`wait` as soon as any watched process has exited (and been reaped).

    While a process is watched, its ``Popen.poll()`` from another thread may answer ``None`` until the
    watch has reaped it; the exit is then seen through ``returncode`` once :meth:`wait` returns.
    """

    def __init__(self) -> None:
        self._exited = threading.Event()
        self._watched: set[subprocess.Popen[Any]] = set()

    def watch(self, proc: subprocess.Popen[Any]) -> None:
        """Watch ``proc`` (again: no effect)."""
        if proc in self._watched:
            return
        self._watched.add(proc)
        threading.Thread(target=self._reap, args=(proc,), name=f"exit-watch-{proc.pid}", daemon=True).start()

    def wait(self, timeout: float) -> bool:
        """Block until a watched process exits or ``timeout`` seconds pass; ``True`` for an exit.

        An exit since the last call returns at once. Exits close together may wake one call only: a
        caller looks at every process's ``returncode`` after each call, so none is missed. Signal
        handlers run while waiting.
        """
        exited = self._exited.wait(timeout)
        self._exited.clear()
        return exited

    def _reap(self, proc: subprocess.Popen[Any]) -> None:
        try:
            proc.wait()
        finally:
            self._exited.set()
