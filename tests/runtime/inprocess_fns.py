"""Functions the lightweight-agent tests call; they learn their rank from ``current_rank()``."""

from __future__ import annotations

import random
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
