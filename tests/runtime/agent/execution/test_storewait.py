"""A rank other than 0 polls rank 0's store address until it accepts (``execution.storewait``): how often, for how
long, and what it reports when the store never comes; on a fake clock."""

from __future__ import annotations

import pytest

from runtime.agent.execution.storewait import FAST, FAST_FOR, SLOW, wait_for_store

pytestmark = pytest.mark.unit


class Store:
    """A fake clock and a store address that refuses until ``listens_at`` (s)."""

    def __init__(self, listens_at: float) -> None:
        self.now = 0.0
        self.listens_at = listens_at
        self.sleeps: list[float] = []
        self.tries: list[tuple[tuple[str, int], float]] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def connect(self, address: tuple[str, int], timeout: float) -> None:
        self.tries.append((address, timeout))
        if self.now < self.listens_at:
            raise ConnectionRefusedError(111, "Connection refused")


def test_a_store_listening_soon_is_reached_within_one_fast_pause() -> None:
    store = Store(listens_at=0.05)
    assert wait_for_store("[::1]", 29500, 30.0, store.clock, store.sleep, store.connect) is None
    assert set(store.sleeps) == {FAST}
    assert store.now - store.listens_at < FAST
    assert store.tries[-1][0] == ("::1", 29500)  # brackets off, as socket wants an IPv6 address


def test_a_late_store_is_polled_slowly_after_the_fast_period() -> None:
    store = Store(listens_at=FAST_FOR + 1.0)
    assert wait_for_store("10.0.0.1", 29500, 30.0, store.clock, store.sleep, store.connect) is None
    fast = [s for s in store.sleeps if s == FAST]
    assert store.sleeps == fast + [SLOW] * (len(store.sleeps) - len(fast))
    assert FAST_FOR <= len(fast) * FAST < FAST_FOR + 2 * FAST
    assert store.now - store.listens_at < SLOW + 1e-9


def test_a_store_that_never_listens_returns_the_last_error_after_the_timeout() -> None:
    store = Store(listens_at=float("inf"))
    failed = wait_for_store("10.0.0.1", 29500, 5.0, store.clock, store.sleep, store.connect)
    assert isinstance(failed, ConnectionRefusedError)
    assert 5.0 <= store.now < 5.0 + SLOW + 1e-9
    assert all(FAST <= timeout <= 1.0 for _, timeout in store.tries)  # no try outlasts the wait by much
