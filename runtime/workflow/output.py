"""The ranks' output in the caller's terminal: each line prefixed with its rank, as the launcher shows it."""

from __future__ import annotations

import sys
from typing import Optional, TextIO

from runtime.call_output import OutputChunk


class RankPrinter:
    """Writes chunks of the ranks' output to this process's stdout and stderr, ``[rank N] `` before
    every line, each rank's and stream's pieces in the order they were written. A rank's unfinished
    line (a prompt, a progress bar) is ended before another rank writes to the same stream, and
    continues on a line of its own.

    Args:
        stdout: where the ranks' stdout goes (default: ``sys.stdout`` at the time of writing).
        stderr: where their stderr goes (default: ``sys.stderr``).
    """

    def __init__(self, stdout: Optional[TextIO] = None, stderr: Optional[TextIO] = None) -> None:
        self._streams = {"stdout": stdout, "stderr": stderr}
        self._at_start: dict[tuple[int, str], bool] = {}
        self._open: dict[str, tuple[int, str]] = {}

    def __call__(self, chunk: OutputChunk) -> None:
        """Write one chunk."""
        if not chunk.text:
            return
        prefix = f"[rank {chunk.rank}] "
        key = (chunk.rank, chunk.stream)
        opened = self._open.pop(chunk.stream, None)
        cut = ""
        if opened is not None and opened != key:
            cut, self._at_start[opened] = "\n", True
        body = chunk.text[:-1].replace("\n", "\n" + prefix) + chunk.text[-1]
        text = prefix + body if self._at_start.get(key, True) else body
        self._at_start[key] = chunk.text.endswith("\n")
        if not self._at_start[key]:
            self._open[chunk.stream] = key
        target = self._streams.get(chunk.stream) or (sys.stderr if chunk.stream == "stderr" else sys.stdout)
        target.write(cut + text)
        target.flush()
