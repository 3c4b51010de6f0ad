"""A rank other than 0 polls rank 0's store address until it accepts (``execution.storewait``): how often, for how
long, how the pause grows with the world, and what it reports when the store never comes; on a fake clock."""

from __future__ import annotations

import types
from datetime import timedelta

import pytest

from runtime.agent.execution import storewait
from runtime.agent.execution.storewait import FAST, FAST_FOR, HOST_TRIES, SLOW, SLOWEST, pause, wait_for_store

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
    assert wait_for_store("[::1]", 29500, 30.0, 4, store.clock, store.sleep, store.connect, lambda: 1.0) is None
    assert set(store.sleeps) == {FAST}
    assert store.now - store.listens_at < FAST
    assert store.tries[-1][0] == ("::1", 29500)  # brackets off, as socket wants an IPv6 address


def test_a_late_store_is_polled_slowly_after_the_fast_period() -> None:
    store = Store(listens_at=FAST_FOR + 1.0)
    assert wait_for_store("10.0.0.1", 29500, 30.0, 4, store.clock, store.sleep, store.connect, lambda: 1.0) is None
    fast = [s for s in store.sleeps if s == FAST]
    assert store.sleeps == fast + [SLOW] * (len(store.sleeps) - len(fast))
    assert FAST_FOR <= len(fast) * FAST < FAST_FOR + 2 * FAST
    assert store.now - store.listens_at < SLOW + 1e-9


def test_a_store_that_never_listens_returns_the_last_error_after_the_timeout() -> None:
    store = Store(listens_at=float("inf"))
    failed = wait_for_store("10.0.0.1", 29500, 5.0, 4, store.clock, store.sleep, store.connect, lambda: 1.0)
    assert isinstance(failed, ConnectionRefusedError)
    assert 5.0 <= store.now < 5.0 + SLOW + 1e-9
    assert all(FAST <= timeout <= 1.0 for _, timeout in store.tries)  # no try outlasts the wait by much


def test_a_large_world_pauses_longer_so_rank_0s_host_is_not_flooded() -> None:
    """All ranks but 0 together try about HOST_TRIES times a second (a tenth of that once late), never pausing
    more than SLOWEST; a small world keeps the fast pause."""
    assert pause(0.0, 4) == FAST and pause(FAST_FOR, 4) == SLOW
    for world in (512, 1024, 4096):
        fast, slow = pause(0.0, world), pause(FAST_FOR, world)
        assert (world - 1) / fast <= HOST_TRIES * 1.001 or fast == SLOWEST
        assert (world - 1) / slow <= HOST_TRIES / 10 * 1.001 or slow == SLOWEST
        assert fast <= slow <= SLOWEST
    assert pause(0.0, 4, jitter=0.5) == FAST * 0.5 and pause(0.0, 4, jitter=1.5) == FAST * 1.5


def test_the_wait_uses_the_worlds_pause_and_its_jitter() -> None:
    store = Store(listens_at=0.6)
    jitters = iter([0.5, 1.5] * 1000)
    assert wait_for_store("10.0.0.1", 29500, 30.0, 1024, store.clock, store.sleep, store.connect,
                          lambda: next(jitters)) is None
    assert store.sleeps[:2] == [pause(0.0, 1024, 0.5), pause(0.0, 1024, 1.5)]


def test_torch_is_left_as_it_is_where_the_wait_has_no_place() -> None:
    """A torch without ``_create_c10d_store`` imports as before; a port torch itself refuses, and rank 0, are not
    waited for (torch's own ``ValueError`` comes at once); an agent store's clients are not either."""
    bare = types.ModuleType("torch.distributed.rendezvous")
    storewait._patch(bare)
    assert not hasattr(bare, "_create_c10d_store")
    storewait.reach_store("127.0.0.1", 70000, 1, 4, timedelta(days=1))  # returns at once: no socket is opened
    storewait.reach_store("127.0.0.1", 29500, 0, 4, timedelta(days=1))
    made: list[tuple[object, ...]] = []
    agent = types.ModuleType("torch.distributed.rendezvous")
    agent._create_c10d_store = lambda *args: made.append(args)  # type: ignore[attr-defined]
    agent._torchelastic_use_agent_store = lambda: True  # type: ignore[attr-defined]
    storewait._patch(agent)
    agent._create_c10d_store("127.0.0.1", 29500, 1, 4, timedelta(days=1))  # type: ignore[attr-defined]
    assert made == [("127.0.0.1", 29500, 1, 4, timedelta(days=1))]
