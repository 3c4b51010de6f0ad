"""The ranks' output in the caller's terminal: each line prefixed with its rank, as the launcher shows it."""

from __future__ import annotations

import sys
from typing import Optional, TextIO

from runtime.agent.spec.console_lines import START, render, resume
from runtime.output_reader import OutputChunk


class RankPrinter:
    """Writes chunks of the ranks' output to this process's stdout and stderr, ``[rank N] `` before
    every line and after every ``\\r`` redraw (a progress bar keeps its prefix), each rank's and
    stream's pieces in the order they were written. A rank's unfinished line (a prompt, a progress
    bar) is ended before another rank (or the same rank's other stream) writes, and continues on a
    line of its own, so the lines of two ranks never merge (the launcher's console does the same).

    Args:
        stdout: where the ranks' stdout goes (default: ``sys.stdout`` at the time of writing).
        stderr: where their stderr goes (default: ``sys.stderr``).
    """

    def __init__(self, stdout: Optional[TextIO] = None, stderr: Optional[TextIO] = None) -> None:
        self._streams = {"stdout": stdout, "stderr": stderr}
        self._states: dict[tuple[int, str], int] = {}
        self._open: Optional[tuple[int, str]] = None

    def __call__(self, chunk: OutputChunk) -> None:
        """Write one chunk."""
        if not chunk.text:
            return
        key = (chunk.rank, chunk.stream)
        data = chunk.text.encode("utf-8", "surrogateescape")
        state = self._states.get(key, START)
        if self._open is not None and self._open != key:
            self._write(self._open[1], "\n")
        if self._open != key:
            data, state = resume(data, state)
        text, state = render(data, f"[rank {chunk.rank}] ".encode(), state)
        self._states[key] = state
        self._open = None if state == START else key
        self._write(chunk.stream, text.decode("utf-8", "surrogateescape"))

    def _write(self, stream: str, text: str) -> None:
        if not text:
            return
        target = self._streams.get(stream) or (sys.stderr if stream == "stderr" else sys.stdout)
        target.write(text)
        target.flush()
