"""Copying one process's output: to the agent's console with a ``[rank N]`` prefix, its log file,
the files torchrun's output options ask for, and a tap (service mode: the call it runs), with the
last stderr lines kept for the root-cause report and the time it last wrote kept for the straggler
report. Standard library only.
"""

from __future__ import annotations

import collections
import os
import select
import threading
import time
from pathlib import Path
from typing import IO, BinaryIO, Callable, Optional

from runtime.agent.execution.console import Console
from runtime.agent.spec import streams

STDERR_TAIL_LINES = 20
"""Lines of a failing process's stderr kept for the root-cause report."""
CHUNK_BYTES = 65536
"""Most bytes of a process's output copied at once."""
PARTIAL_LINE_DELAY = 0.1
"""Seconds an unfinished line waits for its end before it is shown as it is (a prompt, a progress bar)."""
SHOWN = (streams.StreamPlan(console=True, file=False),) * 2
"""Both streams on the console, no files of their own: the default."""
OutputTap = Callable[[int, bytes], None]
"""Receives a copy of what one process writes: the stream (0 stdout, 1 stderr) and the bytes, in order."""


class Output:
    """Copies one process's output streams to the agent's :class:`Console` (with a ``[rank N]``
    prefix at the start of every line and after every ``\\r`` redraw), to its log file, to the files
    its :class:`streams.Streams` plan asks for (as written), and to its tap (service mode: the output
    of the call it runs). Whole lines go at once; an unfinished one after :data:`PARTIAL_LINE_DELAY`,
    so a prompt without a newline (``breakpoint()``'s ``(Pdb)``) shows, or at once when
    :meth:`drain` is asked; the console ends it before another writer's text.

    Args:
        prefix: what the lines are prefixed with, in brackets (``rank 3``).
        log_path: the process's own log file, or ``None``.
        console: the agent's console.
        lock: held while writing the files (the supervisor's).
        plans: stdout's and stderr's plan (console, file).
        stream_dir: where the ``stdout.log``/``stderr.log`` files go, when a plan asks for them.
        filters: the ``--duplicate-std{out,err}-filters`` substrings.
        filtered: where lines matching them are copied, per stream.
        tap: receives a copy of everything, in order.
    """

    def __init__(self, *, prefix: str, log_path: Optional[Path], console: Console,
                 lock: threading.Lock, plans: tuple[streams.StreamPlan, streams.StreamPlan] = SHOWN,
                 stream_dir: Optional[Path] = None, filters: tuple[tuple[str, ...], tuple[str, ...]] = ((), ()),
                 filtered: tuple[Optional[BinaryIO], Optional[BinaryIO]] = (None, None),
                 tap: Optional[OutputTap] = None) -> None:
        self.rename(prefix)
        self._tap = tap
        self._fds: list[Optional[int]] = [None, None]
        self._pending = [b"", b""]
        self._read_locks = (threading.Lock(), threading.Lock())
        self._log = open(log_path, "ab") if log_path else None  # noqa: SIM115 - closed in close()
        self._console = console
        self._writer = console.writer()
        self._plans = plans
        self._files: list[Optional[BinaryIO]] = [
            open(stream_dir / name, "ab") if stream_dir and plan.file else None  # noqa: SIM115 - closed in close()
            for name, plan in zip(("stdout.log", "stderr.log"), plans)
        ]
        self._filters = tuple(tuple(f.encode() for f in group) for group in filters)
        self._filtered = filtered
        self._lock = lock
        self.tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._threads: list[threading.Thread] = []
        self._partial = [b"", b""]
        self.last_output = time.time()
        """Wall-clock time the process last wrote (or started): how long it has been silent."""

    def pump(self, stdout: IO[bytes], stderr: IO[bytes]) -> None:
        """Start copying the process's ``stdout`` and ``stderr`` (pipes, read until their end and
        closed then), one daemon thread each; returns at once (:meth:`close` waits for them)."""
        for index, stream in enumerate((stdout, stderr)):
            thread = threading.Thread(target=self._copy, args=(stream, index), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _copy(self, stream: IO[bytes], index: int) -> None:
        """Pass on whole lines as they arrive; an unfinished line once nothing more has come for
        :data:`PARTIAL_LINE_DELAY` (a prompt), so lines of different ranks do not interleave."""
        fd = stream.fileno()
        self._fds[index] = fd
        with stream:
            while True:
                ready, _, _ = select.select([fd], [], [], PARTIAL_LINE_DELAY if self._pending[index] else None)
                with self._read_locks[index]:
                    if not ready:
                        self._emit_pending(index)
                    elif not self._read_ready(index, fd):
                        break
            with self._read_locks[index]:
                self._fds[index] = None
                self._emit_pending(index)
        if self._partial[index]:
            self._lines(index, b"\n")
        self._console.end(self._writer, index)

    def _read_ready(self, index: int, fd: int) -> bool:
        """Read what ``fd`` has now, if anything (another thread may have drained it), and pass on
        its whole lines; ``False`` at end of stream. Holds the stream's read lock."""
        if not select.select([fd], [], [], 0)[0]:
            return True
        chunk = os.read(fd, CHUNK_BYTES)
        if not chunk:
            return False
        data = self._pending[index] + chunk
        cut = data.rfind(b"\n") + 1
        self._pending[index] = data[cut:]
        if cut:
            self._emit(index, data[:cut])
        return True

    def _emit_pending(self, index: int) -> None:
        if self._pending[index]:
            pending, self._pending[index] = self._pending[index], b""
            self._emit(index, pending)

    def drain(self) -> None:
        """Pass on at once everything the process has written so far, unfinished lines included:
        what it wrote before it answered a call reaches that call's tap before the answer is used."""
        for index in (0, 1):
            with self._read_locks[index]:
                fd = self._fds[index]
                while fd is not None and select.select([fd], [], [], 0)[0]:
                    if not self._read_ready(index, fd):
                        break
                self._emit_pending(index)

    def _emit(self, index: int, data: bytes) -> None:
        """Copy ``data`` of stream ``index`` (0 stdout, 1 stderr) everywhere it goes."""
        self.last_output = time.time()
        plan, own = self._plans[index], self._files[index]
        lines = self._lines(index, data)
        if plan.console:
            self._console.write(self._writer, index, self._prefix, data)
        with self._lock:
            for file in (self._log, own):
                if file is not None:
                    file.write(data)
                    file.flush()
            filters, filtered = self._filters[index], self._filtered[index]
            if filtered is not None and filters:
                filtered.writelines(self._prefix + line + b"\n" for line in lines if any(f in line for f in filters))
                filtered.flush()
        if self._tap is not None:
            self._tap(index, data)

    def _lines(self, index: int, data: bytes) -> list[bytes]:
        """The lines ``data`` completes (kept in the stderr tail, matched against the filters)."""
        lines = (self._partial[index] + data).split(b"\n")
        self._partial[index] = lines.pop()
        if index == 1:  # a line redrawn with \r is kept as the terminal last showed it
            self.tail.extend(line.rstrip(b"\r").rsplit(b"\r", 1)[-1].decode(errors="replace") for line in lines)
        return lines

    def rename(self, prefix: str) -> None:
        """Prefix lines with ``[prefix]`` from now on."""
        self._prefix = f"[{prefix}] ".encode()

    def close(self, timeout: float) -> None:
        """Wait for the copying threads to reach their streams' end, up to ``timeout`` seconds each
        (a stream a child of the process still holds open may not end), then close the log file and
        the stream files. The agent's streams and the filtered sinks are the caller's and stay open."""
        for thread in self._threads:
            thread.join(timeout)
        with self._lock:
            for file in (self._log, *self._files):
                if file is not None:
                    file.close()
