"""What test_elastic_jobs.py's slowest process tests check, for a whole job in memory on a fake clock
(``testbed.fencing.SimJob``: every node's real ``Member``, ``HeartbeatState`` and ``Coordinator``, no
sockets, no processes, no sleeping): a silent node is lost and the survivors are told; a stopped node
is declared dead and rejoins after it resumes; a crashing rank's node is removed by its report; the
coordinator's loss leaves the lowest survivor coordinating and master. The process tests keep
checking the same through real agents, sockets and user processes."""

from __future__ import annotations

import pytest

from runtime.agent.world import World
from testbed.fencing import SimJob

pytestmark = pytest.mark.unit

TTL = 3.0


def coordinator_world(job: SimJob) -> World:
    [holder] = job.coordinators()
    world = job.nodes[holder].coordinator.world  # type: ignore[union-attr]
    assert world is not None
    return world


def test_a_killed_node_is_lost_within_a_ttl_and_the_survivors_are_told():
    job = SimJob(3)
    job.stopped.add(2)  # stopped for good: as silent as a SIGKILLed agent
    job.run(TTL + 0.5)
    world = coordinator_world(job)
    assert [n.node_id for n in world.nodes] == [0, 1] and world.generation == 2
    assert job.running_worlds() == {world.order}, "both survivors' ranks were told of generation 2"
    assert any("sent no heartbeat" in line for line in job.nodes[0].said)


def test_a_stopped_node_is_declared_dead_and_rejoins_cleanly_after_it_resumes():
    job = SimJob(3)
    job.stopped.add(1)
    job.run(2 * TTL)
    assert [n.node_id for n in coordinator_world(job).nodes] == [0, 2]
    job.stopped.clear()
    job.run(4 * TTL)
    world = coordinator_world(job)
    assert [n.node_id for n in world.nodes] == [0, 1, 2] and world.epoch == 1
    assert job.running_worlds() == {world.order}
    assert any("registering again" in line for line in job.nodes[1].said), job.nodes[1].said


def test_a_crashing_rank_is_removed_by_its_report_not_its_silence():
    job = SimJob(3, max_restarts=1)
    job.exit_ranks(2, 5)
    job.run(0.1)
    world = coordinator_world(job)
    assert [n.node_id for n in world.nodes] == [0, 1]
    assert any("exited with code 5" in line for line in job.nodes[0].said), job.nodes[0].said
    assert not any("sent no heartbeat" in line for line in job.nodes[0].said)


def test_when_the_coordinator_node_dies_the_lowest_survivor_takes_over_and_becomes_master():
    job = SimJob(3)
    job.stopped.add(0)
    job.run(3 * TTL)
    world = coordinator_world(job)
    assert job.coordinators() == [1] and world.coordinator[0] == 1
    assert [n.node_id for n in world.nodes] == [1, 2] and world.master_addr == "10.0.0.1"
    assert job.running_worlds() == {world.order}
