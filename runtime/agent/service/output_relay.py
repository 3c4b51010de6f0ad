"""What ranks write while a call runs, on its way to the caller (``POST /output``). Standard library only.

A caller that wants a call's output names it with a key of its own (``"output": KEY`` in the
``/call`` body) and reads it from the coordinator while the call runs, long-polling::

    POST /output  (client -> coordinator)   {"output": KEY, "after": 0, "wait": 0.25}
        200 -> {"chunks": [[rank, "stdout", "text"], ...], "next": 3, "done": false, "known": true}

Every node's ranks' output goes to the coordinator: there into the call's :class:`CallOutputs` log
directly, from every other node through an :class:`OutputForwarder`, which sends batches while the
call runs and the rest before the node answers its parent::

    POST /output  (agent -> coordinator)    {"output": KEY, "chunks": [[rank, "stderr", "text"], ...]}
        200 -> {"accepted": 2}

So when the call's answer reaches the coordinator, every rank's output written before it answered
is in the log, whether the call succeeded or failed; ``done`` is set once the call has ended and
every chunk was read. A call's log is capped (:data:`MAX_CALL_OUTPUT_BYTES`); past it the rest goes
only to the ranks' own logs, and the log says so.
"""

from __future__ import annotations

import collections
import re
import threading
import time
from typing import Any, Callable, Mapping, Optional

from runtime.agent import contract
from runtime.agent.errors import HttpError
from runtime.agent.net.peer import Exchange, PeerTransport
from runtime.agent.net.transport import encode

STREAM_NAMES = ("stdout", "stderr")
MAX_CALL_OUTPUT_BYTES = 8 * 1024 * 1024
"""Most bytes of text one call's log keeps for its caller."""
MAX_WAIT = 5.0
"""Longest long-poll a reader may ask for, seconds."""
KEPT_LOGS = 16
"""Logs of finished calls kept for a late last read."""
FLUSH_INTERVAL = 0.05
"""Seconds a forwarder collects output before it sends a batch."""
FLUSH_BYTES = 256 * 1024
"""A forwarder sends at once when it holds this much text."""
SEND_TIMEOUT = 10.0
"""Seconds one batch may take to reach the coordinator."""
_KEY = re.compile(r"[A-Za-z0-9_-]{1,64}")

Chunk = tuple[int, str, str]
"""``(rank, stream, text)``: a piece of what a rank wrote, stream ``stdout`` or ``stderr``."""


def parse_key(value: Any) -> str:
    """An output key: 1 to 64 of ``A-Z a-z 0-9 _ -``.

    Raises:
        HttpError: 400 for anything else.
    """
    if not isinstance(value, str) or not _KEY.fullmatch(value):
        raise HttpError(400, f"output={value!r} is invalid: use 1 to 64 letters, digits, '_' or '-'")
    return value


def parse_chunks(value: Any) -> list[Chunk]:
    """Chunks as they travel: ``[[rank, stream, text], ...]``.

    Raises:
        HttpError: 400 naming what is wrong.
    """
    if not isinstance(value, list):
        raise HttpError(400, "chunks must be a list of [rank, stream, text]")
    chunks = []
    for item in value:
        if (not isinstance(item, list) or len(item) != 3 or not isinstance(item[0], int) or isinstance(item[0], bool)
                or item[1] not in STREAM_NAMES or not isinstance(item[2], str)):
            raise HttpError(400, f"chunk {item!r} is invalid: use [rank, 'stdout' or 'stderr', text]")
        chunks.append((item[0], item[1], item[2]))
    return chunks


class _Log:
    def __init__(self) -> None:
        self.chunks: list[Chunk] = []
        self.size = 0
        self.done = False
        self.truncated = False


class CallOutputs:
    """The coordinator's logs of the output of calls, by key: written by the call's nodes, read by its caller.

    Args:
        limit: most bytes of text kept per call.
        clock: seconds, monotonic: what a read's ``wait`` is measured on.
    """

    def __init__(self, limit: int = MAX_CALL_OUTPUT_BYTES, clock: Callable[[], float] = time.monotonic) -> None:
        self._limit = limit
        self._clock = clock
        self._cond = threading.Condition()
        self._logs: collections.OrderedDict[str, _Log] = collections.OrderedDict()

    def open(self, key: str) -> None:
        """A call with output ``key`` starts."""
        with self._cond:
            self._logs[key] = _Log()
            self._cond.notify_all()

    def append(self, key: str, chunks: list[Chunk]) -> int:
        """Add ``chunks`` to an open log (chunks for a key not open are dropped); how many were kept."""
        with self._cond:
            log = self._logs.get(key)
            if log is None or log.done:
                return 0
            kept = 0
            for chunk in chunks:
                if log.truncated:
                    break
                if log.size + len(chunk[2]) > self._limit:
                    log.truncated = True
                    log.chunks.append((chunk[0], "stderr", f"\n[trainplane] this call's output is over "
                                                          f"{self._limit // (1024 * 1024)} MiB; the rest is in the "
                                                          f"ranks' logs only\n"))
                    break
                log.chunks.append(chunk)
                log.size += len(chunk[2])
                kept += 1
            self._cond.notify_all()
            return kept

    def close(self, key: str) -> None:
        """The call with output ``key`` has ended: nothing more is added; old finished logs are dropped."""
        with self._cond:
            log = self._logs.get(key)
            if log is not None:
                log.done = True
            finished = [k for k, v in self._logs.items() if v.done]
            for stale in finished[:-KEPT_LOGS]:
                del self._logs[stale]
            self._cond.notify_all()

    def read(self, key: str, after: int, wait: float) -> dict[str, Any]:
        """The chunks of ``key`` from index ``after`` on, waiting up to ``wait`` seconds for some (or the end).

        Returns:
            ``{"chunks", "next", "done", "known"}``: ``done`` once the call ended and these were the last;
            ``known`` is false for a key no call has opened (yet, or ever).
        """
        deadline = self._clock() + wait
        with self._cond:
            while True:
                log = self._logs.get(key)
                if log is not None and (len(log.chunks) > after or log.done):
                    break
                remaining = deadline - self._clock()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            if log is None:
                return {"chunks": [], "next": after, "done": False, "known": False}
            chunks = log.chunks[after:]
            return {"chunks": [list(c) for c in chunks], "next": after + len(chunks), "done": log.done,
                    "known": True}

    def route(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """``POST /output``: a node's chunks, or a caller's read (module docstring).

        Raises:
            HttpError: 400 naming a bad field.
        """
        key = parse_key(body.get("output"))
        if "chunks" in body:
            return {"accepted": self.append(key, parse_chunks(body["chunks"]))}
        after, wait = body.get("after", 0), body.get("wait", 0)
        if not isinstance(after, int) or isinstance(after, bool) or after < 0:
            raise HttpError(400, f"after={after!r} is invalid: use the 'next' of the previous read, or 0")
        if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait <= MAX_WAIT:
            raise HttpError(400, f"wait={wait!r} is invalid: use 0 to {MAX_WAIT:g} seconds")
        return self.read(key, after, float(wait))


class OutputForwarder:
    """Sends one call's output of this node's ranks to the coordinator, in batches, while the call runs.

    Args:
        key: the call's output key.
        coordinator: the coordinator's ``(host, port)``.
        transport: the node's peer transport.
        say: writes one line to the agent's log (a batch that could not be sent).
    """

    def __init__(self, key: str, coordinator: tuple[str, int], transport: PeerTransport,
                 say: Callable[[str], None]) -> None:
        self._key = key
        self._coordinator = coordinator
        self._transport = transport
        self._say = say
        self._cond = threading.Condition()
        self._pending: list[Chunk] = []
        self._size = 0
        self._closed = False
        self._failed = False
        self._thread = threading.Thread(target=self._run, name="output", daemon=True)
        self._thread.start()

    def add(self, rank: int, stream: str, text: str) -> None:
        """Queue a chunk (from any thread)."""
        with self._cond:
            self._pending.append((rank, stream, text))
            self._size += len(text)
            if self._size >= FLUSH_BYTES:
                self._cond.notify_all()

    def close(self) -> None:
        """Send what is left and stop; returns once it has been sent (or could not be)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._closed and self._size < FLUSH_BYTES:
                    self._cond.wait(FLUSH_INTERVAL)
                batch, self._pending, self._size = self._pending, [], 0
                closed = self._closed
            if batch:
                self._send(batch)
            if closed:
                with self._cond:
                    rest, self._pending = self._pending, []
                if rest:
                    self._send(rest)
                return

    def _send(self, batch: list[Chunk]) -> None:
        host, port = self._coordinator
        exchange = Exchange(host, port, "POST", contract.ROUTE_OUTPUT,
                            encode({"output": self._key, "chunks": [list(c) for c in batch]}))
        answer = self._transport.exchange(exchange, SEND_TIMEOUT)
        if not answer.ok and not self._failed:
            self._failed = True
            self._say(f"could not send call output to the coordinator (it stays in the ranks' logs): {answer.problem}")


def sink(outputs: Optional[CallOutputs], forwarder: Optional[OutputForwarder],
         key: str) -> Optional[Callable[[int, str, str], None]]:
    """Where a node's ranks' output for call ``key`` goes: the coordinator's log, a forwarder, or nowhere."""
    if forwarder is not None:
        return forwarder.add
    if outputs is not None and key:
        log = outputs

        def append(rank: int, stream: str, text: str) -> None:
            log.append(key, [(rank, stream, text)])

        return append
    return None
