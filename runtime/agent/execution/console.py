"""The console the ranks' output shares: every line carries its writer's prefix, ``\\r`` redraws
(a progress bar) included, and a writer's unfinished line is ended before another writer's text
goes to the console, so lines of two ranks never merge (the line format: ``spec.console_lines``).
Standard library only.

One :class:`Console` serves one process's two output streams (an agent's stdout and stderr, read
by one terminal). Agents that share a terminal (the local launcher's) also share a small state
file (``Plumbing.console_file``), locked around every write, that names the writer whose line is
open, so an agent ends another agent's open line too. The log and ``--tee`` files get the bytes as
written; only the console is re-prefixed.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import sys
import threading
from typing import BinaryIO, Optional

from runtime.agent.spec.console_lines import START, render, resume

_OWNER_BYTES = 64
"""Size of the owner record in the shared state file."""


class Console:
    """One process's console: its stdout and stderr as one screen shared by many writers.

    Args:
        out: the binary stream for stdout; ``None``: ``sys.stdout``'s at the time of each write.
        err: the binary stream for stderr (often the same terminal); ``None``: ``sys.stderr``'s.
    """

    def __init__(self, out: Optional[BinaryIO] = None, err: Optional[BinaryIO] = None) -> None:
        self._sinks = (out, err)
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._states: dict[tuple[int, int], int] = {}
        self._owner = b""
        self._shared: Optional[int] = None

    def share(self, path: str) -> None:
        """Coordinate with the other processes that write the same terminal through the state
        file ``path`` (created if missing).

        Raises:
            OSError: it cannot be opened.
        """
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        with self._lock:
            self._shared = fd

    def writer(self) -> int:
        """A new writer's id (one per process output, one for the agent's own lines)."""
        return next(self._ids)

    def write(self, writer: int, index: int, prefix: bytes, data: bytes) -> None:
        """Write ``data`` of ``writer`` to stream ``index`` (0 stdout, 1 stderr), ending another
        writer's open line first (and this writer's, on the other stream)."""
        if not data:
            return
        me = b"%d.%d.%d" % (os.getpid(), writer, index)
        with self._lock, _Locked(self._shared):
            owner = self._read_owner()
            if owner and owner != me:
                self._put(int(owner.rsplit(b".", 1)[1]), b"\n")
            state = self._states.get((writer, index), START)
            if owner != me:
                data, state = resume(data, state)
            text, state = render(data, prefix, state)
            self._put(index, text)
            self._states[(writer, index)] = state
            self._write_owner(b"" if state == START else me)

    def end(self, writer: int, index: int) -> None:
        """``writer`` will write no more to stream ``index``: end its line if it is still open."""
        me = b"%d.%d.%d" % (os.getpid(), writer, index)
        with self._lock, _Locked(self._shared):
            if self._states.pop((writer, index), START) != START and self._read_owner() == me:
                self._put(index, b"\n")
                self._write_owner(b"")

    def _put(self, index: int, data: bytes) -> None:
        sink = self._sinks[index] or (sys.stdout if index == 0 else sys.stderr).buffer
        sink.write(data)
        sink.flush()

    def _read_owner(self) -> bytes:
        if self._shared is None:
            return self._owner
        return os.pread(self._shared, _OWNER_BYTES, 0).rstrip(b"\0 ")

    def _write_owner(self, owner: bytes) -> None:
        if self._shared is None:
            self._owner = owner
        elif owner != self._read_owner():
            os.pwrite(self._shared, owner.ljust(_OWNER_BYTES, b" ")[:_OWNER_BYTES], 0)


class _Locked:
    """An exclusive ``flock`` on ``fd`` for a ``with`` block; nothing when ``fd`` is ``None``."""

    def __init__(self, fd: Optional[int]) -> None:
        self._fd = fd

    def __enter__(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_EX)

    def __exit__(self, *_exc: object) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)


_DEFAULT: list[Console] = []
_DEFAULT_LOCK = threading.Lock()


def default() -> Console:
    """This process's console over ``sys.stdout`` and ``sys.stderr`` (made on first use)."""
    with _DEFAULT_LOCK:
        if not _DEFAULT:
            _DEFAULT.append(Console())
        return _DEFAULT[0]
