"""Waiting on a condition with a deadline, and tying a child process's life to its parent's."""

from __future__ import annotations

import ctypes
import signal
import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

_PR_SET_PDEATHSIG = 1


class Abort(RuntimeError):
    """Raised by a condition to stop ``wait_for`` at once (what it waited for can no longer happen)."""


class Timeout(RuntimeError):
    """A condition did not hold before its deadline; the message says what was awaited and the last error."""


def wait_for(condition: Callable[[], T | None], timeout: float, what: str, interval: float = 0.2) -> T:
    """Call ``condition`` until it returns something other than None (or False); return that.

    An exception from ``condition`` counts as "not yet" and is named in the timeout's message, except
    ``Abort``, which propagates.

    Args:
        condition: checked every ``interval`` seconds.
        timeout: seconds before giving up.
        what: the awaited state, for the message.

    Raises:
        Timeout: the deadline passed.
        Abort: ``condition`` raised it.
    """
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    pause = threading.Event()
    while True:
        try:
            result = condition()
        except Abort:
            raise
        except Exception as err:  # any failure is "not yet"; the last one is reported
            last, result = err, None
        if result is not None and result is not False:
            return result
        if time.monotonic() >= deadline:
            detail = f" (last error: {last})" if last is not None else ""
            raise Timeout(f"timed out after {timeout:.0f} s waiting for {what}{detail}")
        pause.wait(interval)


def die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None]:
    """A ``preexec_fn`` making the child receive ``sig`` when the thread that started it exits (Linux's
    ``PR_SET_PDEATHSIG``), so a killed parent leaves no child behind."""

    def preexec() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")

    return preexec
