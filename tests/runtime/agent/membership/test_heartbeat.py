"""Heartbeat timing: backoff, the depth-aware cap, and spread first beats."""

from __future__ import annotations

import pytest

from runtime.agent.membership.heartbeat import HeartbeatTiming
from runtime.agent.membership.tree import layout


def test_heartbeat_intervals_double_from_the_base_up_to_the_cap():
    timing = HeartbeatTiming(interval=0.25, ttl=3.0, hops=2)
    intervals = [timing.next_interval(0.0)]
    for _ in range(4):
        intervals.append(timing.next_interval(intervals[-1]))
    assert intervals == [0.25, 0.5, 0.75, 0.75, 0.75]
    assert timing.next_interval(0.01) == 0.25


@pytest.mark.parametrize(("nodes", "hops", "cap"), [(1, 0, 1.0), (99, 1, 1.0), (100, 2, 0.75), (2551, 2, 0.75),
                                                    (2552, 3, 0.6)])
def test_the_cap_leaves_each_hop_of_a_width_50_tree_one_cap_within_the_ttl(nodes: int, hops: int, cap: float):
    assert layout(nodes, width=50, threshold=100).hops == hops
    timing = HeartbeatTiming(interval=0.25, ttl=3.0, hops=hops)
    assert timing.cap == pytest.approx(cap)
    assert hops * timing.cap < timing.ttl


def test_a_narrow_tree_is_deep_and_beats_more_often():
    assert [layout(n, width=3, threshold=4).hops for n in (3, 4, 13, 14, 40, 41, 100)] == [1, 1, 2, 3, 3, 4, 4]
    assert HeartbeatTiming(ttl=3.0, hops=4).cap == pytest.approx(0.5)


def test_first_beats_after_a_new_world_spread_over_one_cap():
    timing = HeartbeatTiming(interval=0.25, ttl=3.0, hops=2)
    assert [timing.first_delay(f) for f in (0.0, 0.5, 0.999)] == [0.0, 0.375, pytest.approx(0.74925)]
