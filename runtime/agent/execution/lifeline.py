"""The process lifeline: a process dies with the one that started it (the agent with its launcher, a
rank with its agent). Kept apart from ``bootstrap`` so the agent imports it without the rank-side
hooks. Standard library only."""

from __future__ import annotations

import os
import signal
import sys
from typing import Optional

from runtime.agent import contract

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGKILL, parent: Optional[int] = None) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent exits (Linux only).

    ``parent`` is the pid the parent had when it started this process (``None``: the parent now). If the
    process's parent is no longer that pid (the parent died before the signal was armed and the process was
    adopted by init or a subreaper), exit now with ``128 + sig``. A parent that is itself pid 1 (the agent as a
    container's entrypoint, in its own pid namespace) is a live parent, not a sign of adoption.
    On other systems this does nothing.
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    expected = os.getppid() if parent is None else parent
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
    if os.getppid() != expected:
        os._exit(128 + sig)


def parent_pid() -> Optional[int]:
    """Take the parent's pid out of this process's environment (``TRAINPLANE_PARENT_PID``: the agent's pid
    for a rank, the local launcher's for an agent; the user's code does not see it), for :func:`die_with_parent`;
    ``None`` when it is unset or not a pid."""
    value = os.environ.pop(contract.PARENT_PID, "")
    return int(value) if value.isdigit() else None
