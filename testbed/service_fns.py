"""Functions the service-mode tests and benchmarks call on every rank (imported by the worker processes)."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import sys
import threading
import time
from typing import Any

_STATE = {"calls": 0}
"""Calls this process has served (state that must survive between calls)."""


def rank() -> int:
    """This process's global rank."""
    return int(os.environ.get("RANK", "-1"))


def agent_only_names() -> list[str]:
    """The ``TRAINPLANE_*`` and ``PET_*`` variables this process sees, sorted."""
    return sorted(k for k in os.environ if k.startswith(("TRAINPLANE_", "PET_")))


def whoami(max_delay: float = 0.0, seed: int = 0) -> dict[str, Any]:
    """Sleep a random time (seeded per rank and call), then identify this process."""
    _STATE["calls"] += 1
    time.sleep(random.Random(seed * 1000 + rank()).uniform(0.0, max_delay))
    return {"rank": rank(), "node_rank": int(os.environ.get("NODE_RANK", "-1")), "pid": os.getpid(),
            "calls": _STATE["calls"]}


def fail_on(bad_rank: int, sleep: float = 60.0) -> str:
    """Raise on ``bad_rank``; sleep elsewhere (so the call only ends early if they are cancelled)."""
    if rank() == bad_rank:
        raise ValueError(f"rank {bad_rank} refuses")
    time.sleep(sleep)
    return "slept"


def sleep_on(slow_ranks: list[int], sleep: float = 60.0) -> int:
    """Sleep on ``slow_ranks``; return the rank elsewhere."""
    if rank() in slow_ranks:
        time.sleep(sleep)
    return rank()


GATE_WAIT = 120.0
"""Longest a gated rank waits: far beyond the timeout of any call that uses a gate."""


def _wait_for(gate: str) -> None:
    """Wait until the file ``gate`` exists (a test creates it once it is done with the call)."""
    deadline = time.monotonic() + GATE_WAIT
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.05)


def fail_on_gated(bad_rank: int, gate: str) -> str:
    """Raise on ``bad_rank``; elsewhere wait for the file ``gate``, which the test creates only after the
    call returned: a call that ends early proves it did not wait for these ranks."""
    if rank() == bad_rank:
        raise ValueError(f"rank {bad_rank} refuses")
    _wait_for(gate)
    return "waited"


def gated_on(slow_ranks: list[int], gate: str) -> int:
    """Wait for the file ``gate`` on ``slow_ranks``; return the rank at once elsewhere."""
    if rank() in slow_ranks:
        _wait_for(gate)
    return rank()


def stuck_on(bad_rank: int, sleep: float = 60.0) -> int:
    """On ``bad_rank``, block the cancellation signal and sleep: only replacing the process ends it."""
    if rank() == bad_rank:
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT])
        time.sleep(sleep)
    return rank()


def exit_on(bad_rank: int, code: int = 3) -> int:
    """Kill this process with ``code`` on ``bad_rank`` (a crash, not an exception)."""
    if rank() == bad_rank:
        os._exit(code)
    return rank()


def unserialisable() -> object:
    """A result JSON cannot carry."""
    return {1, 2, 3}


def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """The arguments received, with this rank."""
    return {"rank": rank(), "args": list(args), "kwargs": kwargs}


def mark_then_sleep(path: str, sleep: float = 60.0) -> int:
    """Create ``path`` (so a test knows the call is running), then sleep."""
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(sleep)
    return rank()


def digest(data: str) -> dict[str, Any]:
    """This rank, the generation its process is in, and the length and SHA-256 of ``data``."""
    return {"rank": rank(), "generation": os.environ.get("TRAINPLANE_GENERATION"), "length": len(data),
            "sha256": hashlib.sha256(data.encode()).hexdigest()}


def blob(size: int) -> str:
    """``size`` characters that name this rank (``blob_of``): a large result."""
    return blob_of(rank(), size)


def blob_of(rank_: int, size: int) -> str:
    """What :func:`blob` returns on rank ``rank_``."""
    unit = f"rank {rank_};"
    return (unit * (size // len(unit) + 1))[:size]


def environment(names: list[str]) -> dict[str, str]:
    """The values of ``names`` in this process's environment (absent ones left out)."""
    return {name: os.environ[name] for name in names if name in os.environ}


def chatter(lines: int, fail_rank: int = -1, partial: str = "", wait_for: str = "") -> int:
    """Write ``lines`` numbered lines to stdout and to stderr, one line from a child shell (output
    written to the file descriptor, not through ``sys.stdout``), then ``partial`` without a newline;
    with ``wait_for``, then wait (up to 30 s) until that file exists; raise on ``fail_rank``."""
    me = rank()
    for i in range(lines):
        print(f"out {i} of rank {me}")
        print(f"err {i} of rank {me}", file=sys.stderr)
    sys.stdout.flush()
    os.system(f"echo shell of rank {me}")  # noqa: S605 - a fixed command, the test's own
    print(partial, end="")
    deadline = time.monotonic() + 30.0
    while wait_for and not os.path.exists(wait_for) and time.monotonic() < deadline:
        time.sleep(0.02)
    if me == fail_rank:
        raise RuntimeError(f"rank {me} fails after writing")
    return me


def redraw(steps: int) -> int:
    """Draw a progress bar on stderr as tqdm does, ``\\r`` by ``\\r`` with no newline until the end,
    pausing 20 ms between draws so the ranks' bars reach the caller interleaved."""
    me = rank()
    for i in range(steps + 1):
        sys.stderr.write(f"\rbar of rank {me}: {i}/{steps}")
        sys.stderr.flush()
        time.sleep(0.02)
    sys.stderr.write("\n")
    return me


class Counter:
    """State kept in every rank's process between calls (``runtime.workflow.cls``)."""

    def __init__(self, start: int = 0) -> None:
        self.count = start
        self.pid = os.getpid()

    def add(self, n: int = 1) -> dict[str, Any]:
        """Add ``n``; this rank's count and the process holding it."""
        self.count += n
        return {"rank": rank(), "count": self.count, "pid": self.pid}

    def fail(self) -> None:
        """Raise on every rank."""
        raise ValueError(f"counter at {self.count} refuses")

    @staticmethod
    def twice(n: int) -> int:
        """A static method: no instance needed."""
        return 2 * n


def change_seen(since: int) -> dict[str, Any]:
    """The membership change this process applied after generation ``since`` (``runtime.membership``)."""
    from runtime import membership

    change = membership.wait(0.0, since=since)
    return {"generation": membership.generation(), "world_size": int(os.environ["WORLD_SIZE"]),
            "added": None if change is None else list(change.added_ips),
            "removed": None if change is None else list(change.removed_ips)}


def mark_then_wait(prefix: str, gate: str) -> int:
    """Create ``<prefix>-<rank>`` holding this process's pid (so a test knows the call runs there), then
    wait for the file ``gate``; a call interrupted meanwhile (cancelled) creates ``<prefix>-<rank>.cancelled``."""
    path = f"{prefix}-{rank()}"
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    try:
        _wait_for(gate)
    except BaseException:
        with open(path + ".cancelled", "w") as f:
            f.write(str(os.getpid()))
        raise
    return rank()


class BadStr(Exception):
    """An exception whose ``str()`` raises."""

    def __str__(self) -> str:
        raise RuntimeError("str() of BadStr fails")


class Unpicklable(Exception):
    """An exception that cannot be pickled: it holds a lock."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()


Foreign = type("Foreign", (Exception,), {"__module__": "module_only_on_the_ranks"})
"""An exception class whose module the caller (or anyone) cannot import."""


class Stop(BaseException):
    """An exception outside ``Exception``'s tree, as ``KeyboardInterrupt`` is."""


def raise_kind(kind: str) -> None:
    """Raise the exception named by ``kind`` (the error tests' cases)."""
    if kind == "bad_str":
        raise BadStr("x")
    if kind == "unpicklable":
        raise Unpicklable("holds a lock")
    if kind == "foreign":
        raise Foreign("from a module only the ranks have")
    if kind == "base":
        raise Stop("outside Exception")
    if kind == "exit":
        sys.exit(7)
    if kind == "chain":
        try:
            raise BadStr("inner")
        except BadStr as inner:
            try:
                raise KeyError("middle") from inner
            except KeyError:
                raise Foreign("outer")  # noqa: B904 - the implicit context is the point
    raise ValueError(f"unknown kind {kind!r}")


def returns(kind: str) -> Any:
    """Return a value JSON would change or cannot carry (the result tests' cases)."""
    values: dict[str, Any] = {"tuple": {"pair": (1, 2)}, "int_keys": {"scores": {1: "a"}},
                              "generator": (i for i in range(3)), "object": object(), "set": [{1, 2}]}
    return values[kind]
