"""What the ranks write during a call, as the client receives it: :class:`OutputChunk` pieces that an
:class:`OutputReader` fetches from the coordinator (``POST /output`` naming the call's output key, a
long poll) while the call runs.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable

import httpx

from runtime.agent.errors import TransportError

OUTPUT_WAIT = 0.25
"""Seconds one read of a call's output may wait on the coordinator for more (a long poll)."""
OUTPUT_AFTER_CALL = 10.0
"""Seconds the last reads of a call's output may take once the call has answered."""

@dataclass(frozen=True)
class OutputChunk:
    """A piece of what one rank wrote during a call.

    Attributes:
        rank: the global rank that wrote it.
        stream: ``stdout`` or ``stderr``.
        text: the text, whole lines or the start of one (a prompt, a progress bar), in the order written.
    """

    rank: int
    stream: str
    text: str


class OutputReader:
    """Reads one call's output from the coordinator while the call runs, and hands it on.

    Args:
        read: ``JobClient.read_output``: ``(key, after, wait seconds) -> page``.
        key: the call's output key (the call's ``output`` field).
        deliver: receives each chunk, in order per rank and stream, from this reader's thread.
    """

    def __init__(self, read: Callable[[str, int, float], dict[str, Any]], key: str,
                 deliver: Callable[[OutputChunk], None]) -> None:
        self._read = read
        self._key = key
        self._deliver = deliver
        self._answered = threading.Event()
        self._thread = threading.Thread(target=self._run, name="call-output", daemon=True)
        self.problem = ""

    def start(self) -> None:
        """Start reading (a daemon thread)."""
        self._thread.start()

    def finish(self, wait: bool = True) -> None:
        """The call has answered: wait for the last of its output (the coordinator has it all by now),
        unless ``wait`` is false (the call never ran; the reader ends on its own after its next read)."""
        self._answered.set()
        if wait:
            self._thread.join(OUTPUT_AFTER_CALL)

    def _run(self) -> None:
        after = 0
        while True:
            answered = self._answered.is_set()
            try:
                page = self._read(self._key, after, 0.0 if answered else OUTPUT_WAIT)
            except (TransportError, httpx.HTTPError) as exc:
                self.problem = str(exc)
                return
            for rank, stream, text in page.get("chunks", []):
                self._deliver(OutputChunk(int(rank), str(stream), str(text)))
            after = int(page.get("next", after))
            if page.get("done") or (answered and not page.get("chunks")):
                return  # the end; or the call was refused before it ran, so it has no output
