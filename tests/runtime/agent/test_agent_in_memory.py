"""What test_elastic_jobs.py's slowest process tests check, for real ``Agent`` s in one process
(``testbed.inmemory``: a fake network, fake user processes, one fake clock; no sockets, no processes,
no sleeping): a crash is told to every other node by its report; past the budget every agent exits
121; a killed node is found by the coordinator's watch and the survivors go on smaller; the lowest
survivor takes over from a dead coordinator; a dead tree parent's children stay; a stopped node is
declared dead and rejoins; a late node grows the world; with ``monitor_members`` off nothing is
delivered but the world file changes; a node closed out once a rank finished; training going on while the
coordinator does not answer. The process tests keep checking the same over sockets, with
user processes and a real clock."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.agent import contract
from testbed.inmemory import InMemoryJob

pytestmark = pytest.mark.unit

TTL = 3.0
"""The agents' heartbeat TTL (the default), fake seconds."""


@pytest.fixture
def start(tmp_path: Path) -> Iterator:
    """``start(nodes, **settings)``: an :class:`InMemoryJob` whose world of ``nodes`` formed; closed afterwards."""
    jobs: list[InMemoryJob] = []

    def started(nodes: int, **settings: object) -> InMemoryJob:
        job = InMemoryJob(nodes, str(tmp_path), **settings)
        jobs.append(job)
        ids = list(range(nodes))
        assert job.until(lambda: all(job.world(i).node_ids == ids and job.processes(i) for i in ids), within=TTL), \
            job.log(0)
        return job

    yield started
    for job in jobs:
        job.close()


def told(job: InMemoryJob, generation: int) -> list[dict]:
    """What every rank read when told of ``generation``, by rank."""
    return sorted((state for started in job.generations.values() for processes in started
                   for _local, state in processes.told if state["generation"] == generation), key=lambda s: s["rank"])


def members(job: InMemoryJob, node_id: int = 0) -> list[int]:
    """The node ids in the world of node ``node_id``'s coordinator snapshot."""
    return [m["node_id"] for m in job.members(node_id)["members"] if m["node_rank"] is not None]


def test_a_crashing_process_is_told_to_every_other_node_by_its_report(start):
    job = start(3, min_workers=2, max_restarts=1)
    job.exit(2, code=5)
    assert job.wait(lambda: len(told(job, 2)) == 2), job.log(0)
    assert [(s["rank"], s["world_size"], s["removed"]) for s in told(job, 2)] == [(0, 2, ["10.0.0.2"]),
                                                                                  (1, 2, ["10.0.0.2"])]
    assert "rank 2 (node 2 at 10.0.0.2, local rank 0) exited with code 5" in job.log(0)
    assert "sent no heartbeat" not in job.log(0)
    job.finish()
    assert job.wait(lambda: job.ended(0) and job.ended(1))
    assert job.codes[0] == 0 and job.codes[1] == 0


def test_an_elastic_job_past_a_nodes_budget_fails_for_good_with_every_agent_exiting_121(start):
    job = start(3, min_workers=2)
    job.exit(2, code=5)
    assert job.wait(lambda: all(job.ended(i) for i in range(3))), job.log(0)
    assert job.codes == {i: contract.EXIT_JOB_FAILED for i in range(3)}, job.log(0)
    assert "past its budget (max_restarts 0); the last: rank 2" in job.log(0)
    assert "exiting 121: the elastic job failed for good (its verdict's exit code is 5)" in job.log(1)


def test_a_killed_node_is_found_by_the_watch_and_the_survivors_continue_smaller(start):
    job = start(3, min_workers=2)
    job.kill(2)
    assert job.wait(lambda: len(told(job, 2)) == 2 and job.ended(2)), job.log(0)
    assert all(s["removed"] == ["10.0.0.2"] and s["world_size"] == 2 for s in told(job, 2))
    assert job.world(0) == job.world(1) == (2, 2, [0, 1])
    [loss] = [line for line in job.log(0).splitlines() if "generation 2: 2 node(s)" in line]
    assert re.search(r"node 2 \(10\.0\.0\.2\): its agent closed the watch's connection to its agent port.*"
                     r", and a direct probe failed", loss), loss
    assert "sent no heartbeat" not in job.log(0)
    assert job.members()["generation"] == 2 and members(job) == [0, 1]
    job.finish()
    assert job.wait(lambda: job.ended(0)) and job.codes[0] == 0


def test_when_the_coordinator_node_dies_the_lowest_survivor_takes_over_and_becomes_master(start):
    job = start(3, min_workers=2)
    job.kill(0)
    assert job.until(lambda: len(told(job, 2)) == 2, within=3 * TTL), job.log(1)
    assert [(s["rank"], s["world_size"], s["master"], s["removed"]) for s in told(job, 2)] == [
        (0, 2, "10.0.0.1", ["10.0.0.0"]), (1, 2, "10.0.0.1", ["10.0.0.0"])]
    assert job.world(1) == job.world(2) == (2, 2, [1, 2])
    snapshot = job.members(1)
    assert snapshot["generation"] == 2 and snapshot["status"] == "running", job.log(1)
    assert members(job, 1) == [1, 2]
    assert "takes over" in job.log(1)
    job.finish()
    assert job.wait(lambda: job.ended(1) and job.ended(2)), job.log(1)
    assert job.codes[1] == 0 and job.codes[2] == 0


def test_a_late_node_is_admitted_and_the_world_grows(start):
    job = start(2, max_workers=3)
    job.add(2)
    assert job.until(lambda: len(told(job, 2)) == 2 and job.processes(2) is not None, within=TTL), job.log(0)
    assert all(s["added"] == ["10.0.0.2"] and s["world_size"] == 3 for s in told(job, 2))
    assert job.world(2) == (2, 3, [0, 1, 2])
    assert [m["node_rank"] for m in job.members()["members"]] == [0, 1, 2]
    job.finish()
    assert job.wait(lambda: all(job.ended(i) for i in range(3)))
    assert job.codes == {0: 0, 1: 0, 2: 0}


def test_a_node_arriving_once_a_rank_has_finished_is_not_admitted_and_exits_0(start):
    """A closed rendezvous (``RendezvousClosed``): admitting it would make a world whose ranks wait for ranks
    that are gone; it exits 0 saying why, and the job ends in its world."""
    job = start(2, max_workers=3)
    job.exit(0, 0)
    assert job.until(lambda: False, within=1.0) is False  # the coordinator's tick notes its own rank's exit
    job.add(2)
    assert job.until(lambda: job.ended(2), within=TTL), job.log(2)
    assert job.codes[2] == 0 and "not admitted, nothing to do" in job.log(2) and "exited 0" in job.log(2)
    assert job.world(0).node_ids == [0, 1] and job.world(0).generation == 1
    job.finish()
    assert job.wait(lambda: all(job.ended(i) for i in range(2)))
    assert job.codes == {0: 0, 1: 0, 2: 0}


def test_monitor_members_off_delivers_nothing_but_the_world_file_changes(start):
    job = start(2, max_workers=3, monitor_members=False)
    job.add(2)
    assert job.until(lambda: job.world(0).generation == 2 and job.processes(2) is not None, within=TTL), job.log(0)
    first = job.generations[0][0]
    assert first.told == [] and first.world_file(0)["generation"] == 2
    assert first.world_file(0)["world_size"] == 3


def test_a_dead_tree_parent_is_removed_and_its_children_stay(start):
    # Threshold 4, width 2: node 0 hears nodes 1 and 4; node 1 aggregates nodes 2 and 3, node 4 nodes 5 and 6.
    job = start(7, min_workers=2, tree_threshold=4, tree_fanout=2)
    killed = job.clock()
    job.kill(1)
    assert job.wait(lambda: len(told(job, 2)) == 6), job.log(0)

    def orphans_heard_again() -> bool:
        """Nodes 2 and 3, whose parent died, heard from since (re-parented or probed), not lost."""
        seen = {m["node_id"]: m["last_seen_s"] for m in job.members()["members"] if m["node_rank"] is not None}
        return all(seen.get(i) is not None and seen[i] < job.clock() - killed for i in (2, 3))

    assert job.until(orphans_heard_again, within=TTL), job.log(0)
    assert job.members()["generation"] == 2, job.log(0)
    assert members(job) == [0, 2, 3, 4, 5, 6]
    job.finish()
    assert job.wait(lambda: job.ended(0)) and job.codes[0] == 0


def test_a_stopped_agent_is_declared_dead_and_rejoins_cleanly_after_it_resumes(start):
    job = start(3, min_workers=2)
    job.pause(1)
    assert job.until(lambda: job.members()["generation"] == 2, within=2 * TTL), job.log(0)
    assert members(job) == [0, 2]
    assert {m["node_id"]: m["state"] for m in job.members()["members"]}[1] == "dead"
    job.resume(1)

    def whole() -> bool:
        snapshot = job.members()["members"]
        return [m["node_rank"] for m in snapshot] == [0, 1, 2] and all(m["state"] == "running" for m in snapshot)

    assert job.until(whole, within=4 * TTL), job.log(0)
    assert job.members()["generation"] > 2 and members(job) == [0, 1, 2]
    assert "registering again" in job.log(1)
    job.finish()
    assert job.wait(lambda: all(job.ended(i) for i in range(3)))
    assert job.codes == {0: 0, 1: 0, 2: 0}


def test_training_goes_on_while_the_coordinator_is_unreachable_and_it_answers_again(start):
    """A world of two never fails over: with node 0's agent paused, node 1's beats fail and it says so, its
    ranks keep running (no new world), and once node 0 answers again both finish with 0."""
    job = start(2)
    job.pause(0)
    assert job.until(lambda: "unreachable" in job.log(1), within=2 * TTL), job.log(1)
    assert "heartbeat to" in job.log(1)
    assert job.processes(1) is not None and all(job.processes(1).running) and job.world(1).generation == 1
    job.resume(0)
    assert job.until(lambda: "the coordinator answers again" in job.log(1), within=2 * TTL), job.log(1)
    job.finish()
    assert job.wait(lambda: all(job.ended(i) for i in range(2)))
    assert job.codes == {0: 0, 1: 0} and job.world(0).generation == 1
