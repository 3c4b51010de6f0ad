"""Elastic failure budgets and re-admission backoff, decided with a fake clock.

The rule is torchrun's (torch 2.13.0 ``torch/distributed/elastic/agent/server/api.py``,
``SimpleElasticAgent._invoke_run``): a failed worker group (``UNHEALTHY``/``FAILED``) decrements that
agent's ``_remaining_restarts`` and fails once none remain; a membership change
(``num_nodes_waiting() > 0``) restarts the workers without counting.
"""

from __future__ import annotations

import pytest

from runtime.agent.rendezvous.actions import Register
from runtime.agent.rendezvous.events import WorldArrived
from runtime.agent.rendezvous.member import REJOIN_BACKOFF_CAP
from runtime.agent.spec.status import FAILED, RUNNING
from tests.runtime.agent.rendezvous.test_coordinator import failure, formed, node, pushes
from tests.runtime.agent.rendezvous.test_member import exited, member, running, world

pytestmark = pytest.mark.unit


def rejoin(c, node_id: int, now: float):
    """Node ``node_id`` registers again; the world it makes."""
    [push] = pushes(c.register(node(node_id), now))
    return push.world


def test_each_nodes_failures_count_against_its_own_max_restarts_and_the_next_fails_the_job():
    c = formed(min_workers=2, max_restarts=1)
    [shrunk] = pushes(c.report(2, 1, FAILED, failure(5, at=1.0)))
    assert shrunk.world.status == RUNNING and [n.node_id for n in shrunk.world.nodes] == [0, 1]
    grown = rejoin(c, 2, 10.0)
    [other] = pushes(c.report(1, grown.generation, FAILED, failure(3, at=11.0)))
    assert other.world.status == RUNNING, "node 1 has a budget of its own"
    grown = rejoin(c, 1, 20.0)
    [final] = pushes(c.report(2, grown.generation, FAILED, failure(4, at=21.0)))
    assert final.world.status == FAILED and final.world.exit_code == 14 and final.world.cause.rank == 4
    assert final.world.message.startswith("node 2's processes failed 2 time(s), past its budget (max_restarts 1); "
                                          "the last: rank 4")


def test_with_no_restarts_an_elastic_jobs_first_failure_fails_it_with_the_root_cause():
    [final] = pushes(formed(min_workers=2).report(2, 1, FAILED, failure(5, at=1.0)))
    assert final.world.status == FAILED and final.world.exit_code == 15 and final.world.cause.rank == 5


def test_a_vanished_node_and_a_joining_one_spend_no_budget():
    c = formed(min_workers=2, max_restarts=0)
    [shrunk] = pushes(c.lose(2, "node 2 sent no heartbeat"))
    assert shrunk.world.status == RUNNING
    assert rejoin(c, 2, 10.0).status == RUNNING
    [again] = pushes(c.lose(2, "node 2 sent no heartbeat"))
    assert again.world.status == RUNNING


def test_a_node_whose_processes_keep_failing_waits_ever_longer_to_register_again():
    """One TTL (3 s) doubled per failure of its own, capped; a node left out for another's failure
    waits one TTL."""
    m = running(member(elastic=True))
    delays, generation = [], 1
    for _ in range(7):
        m.handle(exited(0, 5, generation=generation), float(generation))
        left_out = m.handle(WorldArrived(world(generation + 1, nodes=(0, 2))), float(generation))
        delays.extend(a.delay for a in left_out if isinstance(a, Register))
        m.handle(WorldArrived(world(generation + 2)), float(generation))  # admitted again
        generation += 2
    assert delays == [6.0, 12.0, 24.0, 48.0, REJOIN_BACKOFF_CAP, REJOIN_BACKOFF_CAP, REJOIN_BACKOFF_CAP]
    bystander = running(member(node_id=2, elastic=True))
    left_out = bystander.handle(WorldArrived(world(2, nodes=(0, 1))), 1.0)
    assert [a.delay for a in left_out if isinstance(a, Register)] == [3.0]
