"""Whether a generation's processes are worth starting once its node's slow ranks have stopped (``superseded``):
not when a newer world waiting in the agent's queue restarts every process or leaves the node out, or the job's
verdict came; yes when the newer world is an elastic change of the same restart that the node stays in, or when
nothing waiting is newer."""

from __future__ import annotations

from dataclasses import replace

import pytest

from runtime.agent.execution.procs import ProcExit
from runtime.agent.rendezvous.election import Ballot
from runtime.agent.rendezvous.events import ProcessExited, VotesCounted, WorldArrived
from runtime.agent.rendezvous.superseded import superseded
from runtime.agent.spec.status import FAILED
from runtime.agent.world import Node, World

pytestmark = pytest.mark.unit


def world(generation: int, restart_count: int = 0, nodes: int = 3, epoch: int = 1) -> World:
    return World(job="j", generation=generation, restart_count=restart_count, max_restarts=3, master_port=29500,
                 nodes=tuple(Node(i, f"10.0.0.{i}", 32300, 1) for i in range(nodes)), epoch=epoch)


def arrived(*worlds: World) -> list[WorldArrived]:
    return [WorldArrived(w) for w in worlds]


def test_a_newer_restart_an_ended_job_or_a_world_without_the_node_replaces_the_start():
    starting = world(2, restart_count=1)
    assert superseded(starting, arrived(world(3, restart_count=2)), 0)
    assert superseded(starting, arrived(world(3, restart_count=1).finished(FAILED, "node 2 lost", 1)), 0)
    assert superseded(starting, arrived(starting.finished(FAILED, "node 2 lost", 1)), 0), "its own verdict"
    assert superseded(starting, arrived(world(3, restart_count=1, nodes=2)), 2), "node 2 is not in it"
    assert superseded(starting, arrived(world(2, restart_count=1), world(1, restart_count=2, epoch=2)), 0), \
        "a later epoch is newer whatever its generation"
    exited = ProcessExited(ProcExit(1, 0, 0, 137, (), 0.0, True, 9))
    assert superseded(starting, [exited, *arrived(world(3, restart_count=2))], 0), "an old rank's exit changes nothing"


def test_an_elastic_change_the_node_stays_in_an_older_world_or_none_does_not():
    starting = world(2, restart_count=1)
    assert not superseded(starting, [], 0)
    assert not superseded(starting, arrived(world(3, restart_count=1, nodes=2)), 0), "delivered to the ranks started"
    assert not superseded(starting, arrived(world(1, restart_count=0), replace(starting)), 0), "not newer"
    assert not superseded(starting, arrived(world(1).finished(FAILED, "an older generation's verdict", 1)), 0)


def test_only_the_first_world_member_takes_decides():
    """A takeover's elastic change (a later epoch, the same restart) comes first: Member takes it and delivers it to
    the ranks, then ignores an older epoch's restart that a fenced coordinator pushed late. The ranks must start."""
    starting = world(4, restart_count=1)
    takeover, late = world(5, restart_count=1, epoch=2), world(5, restart_count=2, epoch=1)
    assert not superseded(starting, arrived(takeover, late), 0)


def test_an_event_that_may_give_the_node_another_world_first_means_start():
    starting = world(2, restart_count=1)
    votes = VotesCounted(Ballot(2, 1, 0, (1, 2)), (1, 2), 2, newer=world(3, restart_count=1, epoch=2))
    assert not superseded(starting, [votes, *arrived(world(3, restart_count=2))], 0)
