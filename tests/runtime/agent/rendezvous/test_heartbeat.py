"""Heartbeats with a fake clock: backoff, the depth-aware cap, spread first beats, and what each outcome means."""

from __future__ import annotations

import pytest

from runtime.agent.rendezvous.events import CoordinatorBack, CoordinatorLost, Removed, WorldArrived
from runtime.agent.rendezvous.heartbeat import Beat, BeatEffects, HeartbeatState, HeartbeatTiming
from runtime.agent.rendezvous.tree import layout
from runtime.agent.world import Node, World

pytestmark = pytest.mark.unit


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
    assert HeartbeatTiming(interval=0.25, ttl=3.0, hops=4).cap == pytest.approx(0.5)


def test_first_beats_after_a_new_world_spread_over_one_cap():
    timing = HeartbeatTiming(interval=0.25, ttl=3.0, hops=2)
    assert [timing.first_delay(f) for f in (0.0, 0.5, 0.999)] == [0.0, 0.375, pytest.approx(0.74925)]


def world(nodes: int = 13, generation: int = 1) -> World:
    return World(job="j", generation=generation, restart_count=0, max_restarts=0, master_port=29500,
                 nodes=tuple(Node(i, f"10.0.0.{i}", 32300, 1) for i in range(nodes)),
                 coordinator=(0, "10.0.0.0", 32300))


def state(node_id: int = 2, width: int = 3, threshold: int = 4) -> HeartbeatState:
    return HeartbeatState(HeartbeatTiming(interval=0.25, ttl=3.0), node_id, width=width, threshold=threshold, now=0.0,
                          jitter=lambda: 0.5)


def test_a_new_world_waits_a_spread_first_delay_then_beats_to_the_tree_parent_with_ages():
    s = state(node_id=2)
    assert s.next(world(), registered=True, coordinating=False, now=0.0) is None
    assert s.timing.hops == 2 and s.delay() == pytest.approx(0.5 * 0.75)
    beat = s.next(world(), registered=True, coordinating=False, now=0.4)
    assert beat == Beat(world().nodes[1], 1, ages=True), "13 nodes at width 3: node 2 reports to node 1"
    assert s.answered(beat, None, 0.5) == BeatEffects()
    assert s.delay() == pytest.approx(0.75), "doubled from the first delay, capped at ttl/(hops+2)"


def test_children_of_the_coordinator_and_flat_worlds_beat_to_the_coordinator():
    for s, nodes in ((state(node_id=5), 13), (state(node_id=5, threshold=100), 13)):
        s.next(world(nodes), True, False, 0.0)
        assert s.next(world(nodes), True, False, 1.0) == Beat(None, 1, ages=True)


def test_registered_without_a_world_asks_the_coordinator_once_per_ttl():
    s = state()
    assert s.next(None, registered=True, coordinating=False, now=0.0) is None and s.delay() == 3.0
    beat = s.next(None, registered=True, coordinating=False, now=3.0)
    assert beat == Beat(None, 0, ages=False)
    later = world(generation=4)
    assert s.answered(beat, later, 3.1) == BeatEffects((WorldArrived(later),))
    assert s.delay() == 3.0


def test_nobody_beats_before_registering_nor_the_coordinator_nor_outside_the_world():
    s = state(node_id=20)
    assert s.next(None, registered=False, coordinating=False, now=0.0) is None
    assert s.next(world(), registered=True, coordinating=True, now=0.0) is None
    assert s.next(world(), registered=True, coordinating=False, now=0.0) is None, "node 20 is not in the world"
    assert s.delay() == 0.25


def test_a_parent_refusing_sends_the_next_beat_to_the_coordinator_and_the_coordinator_refusing_means_rejoin():
    s = state(node_id=2)
    s.next(world(), True, False, 0.0)
    beat = s.next(world(), True, False, 1.0)
    assert s.refused(beat, "409 not in this node's world") == BeatEffects()
    direct = s.next(world(), True, False, 1.0)
    assert direct == Beat(None, 1, ages=True)
    effects = s.refused(direct, "409 register again")
    assert effects == BeatEffects((Removed("the coordinator no longer counts this node (409 register again)"),))


def test_failures_back_off_are_logged_sparsely_and_a_silent_coordinator_is_lost_once_then_back():
    s = state(node_id=5)
    w = world()
    s.next(w, True, False, 0.0)
    beat = s.next(w, True, False, 0.5)
    first = s.failed(beat, w, "10.0.0.0:32300", "refused", now=1.0)
    assert first.lines == ("heartbeat to 10.0.0.0:32300 failed (1 in a row): refused",) and not first.events
    for _ in range(2, 20):
        assert s.failed(beat, w, "10.0.0.0:32300", "refused", now=2.0).lines == ()
    assert s.failed(beat, w, "10.0.0.0:32300", "refused", now=2.0).lines[0].startswith("heartbeat to 10.0.0.0")
    lost = s.failed(beat, w, "10.0.0.0:32300", "refused", now=3.6)
    assert lost.events == (CoordinatorLost(w.coordinator, pytest.approx(3.6)),)
    assert s.failed(beat, w, "10.0.0.0:32300", "refused", now=5.0).events == (), "lost is said once"
    assert s.answered(beat, None, 5.5).events == (CoordinatorBack(22),)


def test_a_silent_parent_is_not_the_coordinator_lost():
    s = state(node_id=2)
    w = world()
    s.next(w, True, False, 0.0)
    beat = s.next(w, True, False, 0.5)
    assert beat.parent is not None
    assert s.failed(beat, w, "10.0.0.1:32300", "timed out", now=10.0).events == ()


def test_a_parent_that_answers_but_has_not_reached_the_coordinator_for_a_ttl_loses_it_for_its_subtree():
    """Node 2 beats to node 1 (13 nodes, width 3); node 1 answers, saying the coordinator last heard it
    1 s, 2.5 s, then 3.5 s before: past the TTL it is the coordinator lost, said once and named by the
    parent (the fencing rule's leaves vote too); a parent heard again in time brings it back, once."""
    s, w = state(node_id=2), world()
    s.next(w, True, False, 0.0)
    beat = s.next(w, True, False, 0.5)
    assert beat is not None and beat.parent == w.nodes[1]
    assert s.answered(beat, None, 1.0, upstream=1.0).events == ()
    assert s.upstream_age(1.5) == pytest.approx(1.5), "the parent's age, then the time since its answer"
    assert s.answered(beat, None, 3.0, upstream=2.5).events == ()
    lost = s.answered(beat, None, 4.0, upstream=3.5)
    assert lost.events == (CoordinatorLost(w.coordinator, pytest.approx(3.5), via=1),)
    assert s.answered(beat, None, 5.5, upstream=5.0).events == (), "lost is said once"
    assert s.upstream_age(5.5) == pytest.approx(5.0), "its own children hear the same"
    assert s.answered(beat, None, 6.0, upstream=0.2).events == (CoordinatorBack(0),)
    assert s.answered(beat, None, 6.5, upstream=0.2).events == ()


def test_a_direct_reporter_counts_the_coordinator_silent_from_its_last_answer():
    s, w = state(node_id=1), world()
    s.next(w, True, False, 0.0)
    beat = s.next(w, True, False, 0.5)
    assert beat == Beat(None, 1, ages=True)
    s.answered(beat, None, 1.0)
    assert s.upstream_age(2.0) == pytest.approx(1.0)
    assert s.failed(beat, w, "10.0.0.0:32300", "404", now=4.0).events == ()
    assert s.failed(beat, w, "10.0.0.0:32300", "404", now=4.1).events == (CoordinatorLost(w.coordinator,
                                                                                         pytest.approx(3.1)),)
    assert s.upstream_age(4.1) == pytest.approx(3.1)


def test_a_node_waiting_for_its_world_tells_its_children_nothing_of_the_coordinator():
    """Registered, no world yet: its first beat comes a TTL later, so its age toward the coordinator
    would pass the TTL while it waits; it says 0 (nothing known) until it beats in a world."""
    s = state(node_id=1)
    assert s.next(None, True, False, 0.0) is None
    assert s.upstream_age(10.0) == 0.0
    w = world()
    s.next(w, True, False, 10.0)
    assert s.upstream_age(11.0) == pytest.approx(1.0), "a new world is the coordinator's news"


def test_a_parent_that_does_not_say_its_age_tells_nothing_of_the_coordinator():
    """A parent not in this node's world answers without ``upstream_s``: the child neither counts the
    coordinator heard (a dead one would never be lost) nor lost; a later answer with an age decides."""
    s, w = state(node_id=2), world()
    s.next(w, True, False, 0.0)
    beat = s.next(w, True, False, 0.5)
    assert beat is not None and beat.parent is not None
    assert s.answered(beat, None, 2.0, upstream=1.0).events == ()
    assert s.answered(beat, None, 6.0).events == ()
    assert s.upstream_age(6.0) == pytest.approx(5.0), "still counted from the last age the parent gave"
    assert s.answered(beat, None, 6.5, upstream=0.1).events == ()
    assert s.upstream_age(6.5) == pytest.approx(0.1)
