"""Membership changes inside a user process: delivered as an exception, or polled at safe points.

The agent writes the new world for each of its processes to the file named by
``TRAINPLANE_WORLD_FILE`` and sends the process ``SIGUSR1``. The handler installed by
``runtime.agent.bootstrap`` (:func:`install`) updates ``os.environ`` to the new world (WORLD_SIZE,
RANK, MASTER_ADDR, POD_IPS, ...) and raises :class:`WorkerMembershipChanged` in the main thread.
Code that prefers safe points calls :func:`poll` instead (and may run with ``monitor_members`` off).
Standard library only.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any, Optional

from runtime.agent import contract
from runtime.agent.errors import WorkerMembershipChanged

DELIVERY_SIGNAL = signal.SIGUSR1
"""The signal the agent sends a user process when its world changed."""


def _read() -> Optional[dict[str, Any]]:
    path = os.environ.get(contract.TRAINPLANE_WORLD_FILE)
    if not path:
        return None
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def poll() -> Optional[WorkerMembershipChanged]:
    """Apply a pending membership change, if any, and return it (``None`` when there is none).

    On a change, ``os.environ`` is updated to the new world before this returns. Safe to call as
    often as you like: a change is returned once.
    """
    state = _read()
    current = int(os.environ.get(contract.TRAINPLANE_GENERATION, "0"))
    if state is None or int(state["generation"]) <= current:
        return None
    os.environ.update(state["env"])
    return WorkerMembershipChanged(
        state["added_ips"], state["removed_ips"], state["previous_ips"], state["current_ips"], int(state["generation"])
    )


class _Gate:
    """Counts callers of :func:`wait`: while any waits, the handler leaves the change to them."""

    deferring = 0


def wait(timeout: float, interval: float = 0.05) -> Optional[WorkerMembershipChanged]:
    """Wait up to ``timeout`` seconds for a membership change; apply and return it, or ``None``.

    For code that caught a collective's error (a peer vanished) and wants the agent's account of
    the new world before re-initialising. The change is returned, never raised, while waiting.
    """
    deadline = time.monotonic() + timeout
    _Gate.deferring += 1
    try:
        while True:
            change = poll()
            if change is not None or time.monotonic() >= deadline:
                return change
            time.sleep(interval)
    finally:
        _Gate.deferring -= 1


def _handler(_signum: int, _frame: object) -> None:
    if _Gate.deferring:
        return
    change = poll()
    if change is not None:
        raise change


def install() -> None:
    """Install the ``SIGUSR1`` handler that raises the change in the main thread (bootstrap calls it)."""
    signal.signal(DELIVERY_SIGNAL, _handler)


def ignore() -> None:
    """Ignore delivery signals (``monitor_members=False``); :func:`poll` still works."""
    signal.signal(DELIVERY_SIGNAL, signal.SIG_IGN)
