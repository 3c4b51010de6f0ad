"""Functions the lightweight-agent tests call; they learn their rank from ``current_rank()``."""

from __future__ import annotations

import random
import threading
import time

from testbed.inprocess import current_rank


def delayed_rank(max_delay: float, seed: int) -> int:
    """Sleep a random time (seeded per rank and call), then return the rank."""
    time.sleep(random.Random(seed * 1000 + current_rank()).uniform(0.0, max_delay))
    return current_rank()


def fail_on(bad_rank: int, sleep: float) -> int:
    """Raise on ``bad_rank``; sleep elsewhere."""
    if current_rank() == bad_rank:
        raise KeyError(f"rank {bad_rank} has no key")
    time.sleep(sleep)
    return current_rank()


def sleep_on(slow_ranks: list[int], sleep: float) -> int:
    """Sleep on ``slow_ranks``; return the rank elsewhere."""
    if current_rank() in slow_ranks:
        time.sleep(sleep)
    return current_rank()


GATES: dict[str, threading.Event] = {}
"""Gates the gated functions wait at, by name; a test opens one when it is done with the call."""
GATE_WAIT = 60.0
"""Longest a gated rank waits: far beyond any call's timeout in the tests that use a gate."""


AT_GATE: set[str] = set()
"""The gates of :func:`gated_two` a rank has reached (and waits at), so a test knows its ranks run."""


def gate(name: str) -> threading.Event:
    """The gate ``name`` (made closed on first use)."""
    return GATES.setdefault(name, threading.Event())


def fail_on_gated(bad_rank: int, name: str) -> int:
    """Raise on ``bad_rank``; elsewhere wait at gate ``name``, which the test opens only after the call
    returned, so a call that ends early proves it did not wait for these ranks."""
    if current_rank() == bad_rank:
        raise KeyError(f"rank {bad_rank} has no key")
    gate(name).wait(GATE_WAIT)
    return current_rank()


def gated_on(slow_ranks: list[int], name: str) -> int:
    """Wait at gate ``name`` on ``slow_ranks``; return the rank at once elsewhere."""
    if current_rank() in slow_ranks:
        gate(name).wait(GATE_WAIT)
    return current_rank()


def gated_two(first: int, first_gate: str, second: int, second_gate: str) -> int:
    """Wait at ``first_gate`` on rank ``first`` and at ``second_gate`` on rank ``second``; return at once elsewhere."""
    rank = current_rank()
    if rank in (first, second):
        name = first_gate if rank == first else second_gate
        AT_GATE.add(name)
        gate(name).wait(GATE_WAIT)
    return rank
