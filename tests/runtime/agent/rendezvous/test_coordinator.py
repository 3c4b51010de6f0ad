"""Coordinator decisions with a fake clock: quorum, last call, verdicts, restarts."""

from __future__ import annotations

import pytest

from runtime.agent.errors import MembershipRefused, NotAMember, RendezvousClosed
from runtime.agent.rendezvous.actions import Probe, Push, Say
from runtime.agent.rendezvous.coordinator import Coordinator
from runtime.agent.rendezvous.forming import LAST_CALL, PROGRESS_MIN_GAP
from runtime.agent.routes import status_of
from runtime.agent.spec.agent_settings import AgentSettings
from runtime.agent.spec.status import FAILED, RUNNING, SUCCEEDED
from runtime.agent.world import Failure, Node
from testbed.settings import agent_settings

pytestmark = pytest.mark.unit


def settings(**kw) -> AgentSettings:
    base = dict(job_name="j", token="t", node_id=0, workers=3, num_proc=2, entrypoint=("x.py",), coordinator="c",
                quorum_timeout=10.0)
    return agent_settings(**{**base, **kw})


def node(i: int) -> Node:
    return Node(i, f"10.0.0.{i}", 32300, 2)


def pushes(actions) -> list[Push]:
    return [a for a in actions if isinstance(a, Push)]


def test_world_forms_when_every_node_registered_in_node_order():
    c = Coordinator(settings(), now=0.0)
    assert not pushes(c.register(node(2), 0.1))
    assert not pushes(c.register(node(0), 0.2))
    [push] = pushes(c.register(node(1), 0.3))
    assert [n.node_id for n in push.world.nodes] == [0, 1, 2]
    assert push.world.generation == 1 and push.world.status == RUNNING


def test_quorum_progress_is_said_at_most_once_per_gap_however_fast_nodes_register():
    c = Coordinator(settings(workers=1024), now=0.0)
    said = [a.message for i in range(600) for a in c.register(node(i), i * 0.001) if isinstance(a, Say)]
    assert said == ["1/1024 nodes registered (quorum 1024)"]
    said = [a.message for a in c.register(node(600), PROGRESS_MIN_GAP) if isinstance(a, Say)]
    assert said == ["601/1024 nodes registered (quorum 1024)"]
    said = [a.message for i in range(601, 1024) for a in c.register(node(i), 1.5) if isinstance(a, Say)]
    assert said == ["1024/1024 nodes registered (quorum 1024)"], "the last registration is always said"


def test_partial_quorum_waits_for_the_last_call():
    c = Coordinator(settings(quorum_workers=2, min_workers=2, max_workers=3), now=0.0)
    c.register(node(0), 1.0)
    assert not pushes(c.register(node(1), 1.0))
    assert not pushes(c.tick(1.0 + LAST_CALL / 2))
    [push] = pushes(c.tick(1.0 + LAST_CALL))
    assert [n.node_id for n in push.world.nodes] == [0, 1]


def test_quorum_timeout_fails_naming_the_missing_nodes():
    c = Coordinator(settings(), now=0.0)
    c.register(node(0), 0.0)
    assert not pushes(c.tick(9.9))
    actions = c.tick(10.0)
    [push] = pushes(actions)
    assert push.world.status == FAILED and push.world.exit_code == 3
    assert "missing node ranks: 1, 2" in push.world.message
    assert any(isinstance(a, Say) and "quorum not met" in a.message for a in actions)


@pytest.mark.parametrize("node_id", [3, -1])
def test_registration_outside_the_job_is_rejected(node_id: int):
    c = Coordinator(settings(), now=0.0)
    with pytest.raises(NotAMember, match=f"node rank {node_id} is outside this job's 0..2"):
        c.register(Node(node_id, "x", 1, 1), 0.0)


def test_a_fixed_size_jobs_replaced_node_is_rejected_but_reregistration_is_idempotent():
    """A fixed-size job's quorum is every node (``quorum_workers`` below ``workers`` is refused by the
    spec), so the node refused is one that comes back at a new address after the world formed."""
    c = Coordinator(settings(workers=2), now=0.0)
    c.register(node(0), 0.0)
    c.register(node(1), 0.0)
    assert c.register(node(0), 2.0) == []
    with pytest.raises(MembershipRefused, match="formed at generation 1 without node 1") as info:
        c.register(Node(1, "10.0.0.99", 32300, 2), 2.0)
    assert not isinstance(info.value, NotAMember)


def test_an_elastic_world_whose_ranks_began_to_finish_admits_no_newcomer():
    """Once a rank of the running generation exited 0, a joiner (a replacement at a new address too) would
    make a world whose ranks wait for ranks that are gone: it is refused as a closed rendezvous (410), and
    the world stays as it is; before that, the same joiner is admitted."""
    c = Coordinator(settings(quorum_workers=2, min_workers=2, max_workers=3), now=0.0)
    for i in range(2):
        c.register(node(i), 0.0)
    c.tick(LAST_CALL)
    assert c.world is not None and [n.node_id for n in c.world.nodes] == [0, 1]
    c.activity(1, c.world.generation, [[2, None, 0.0], [3, None, 0.0]], 40.0)
    assert c.stragglers.finishing(c.world) is None
    c.activity(0, c.world.generation, [[0, 0, 0.0], [1, None, 0.0]], 41.0)
    with pytest.raises(RendezvousClosed, match="rank 0 of generation 1 exited 0; node 2 is not admitted") as info:
        c.register(node(2), 42.0)
    assert status_of(info.value) == 410
    with pytest.raises(RendezvousClosed):
        c.register(Node(1, "10.0.0.99", 32300, 2), 42.0)
    assert [n.node_id for n in c.world.nodes] == [0, 1] and c.world.generation == 1


def test_an_elastic_world_with_every_rank_running_admits_a_newcomer():
    c = Coordinator(settings(quorum_workers=2, min_workers=2, max_workers=3), now=0.0)
    for i in range(2):
        c.register(node(i), 0.0)
    c.tick(LAST_CALL)
    c.activity(0, 1, [[0, None, 0.0], [1, 1, 0.0]], 41.0)  # a failure is no finish
    assert pushes(c.register(node(2), 42.0)) and c.world is not None and c.world.generation == 2


def formed(**kw) -> Coordinator:
    c = Coordinator(settings(**kw), now=0.0)
    for i in range(3):
        c.register(node(i), 0.0)
    return c


def failure(rank: int, at: float) -> Failure:
    return Failure(rank=rank, node_id=rank // 2, local_rank=rank % 2, exit_code=10 + rank, timestamp=at)


def test_success_only_when_every_node_succeeded():
    c = formed()
    assert not pushes(c.report(0, 1, SUCCEEDED))
    assert not pushes(c.report(1, 1, SUCCEEDED))
    [push] = pushes(c.report(2, 1, SUCCEEDED))
    assert push.world.status == SUCCEEDED and push.world.exit_code == 0


def test_first_failure_fails_the_job_with_the_earliest_cause():
    c = formed()
    [push] = pushes(c.report(2, 1, FAILED, failure(5, at=2.0)))
    assert push.world.status == FAILED and push.world.exit_code == 15 and push.world.cause.rank == 5
    assert c.report(1, 1, FAILED, failure(3, at=1.0)) == []


def test_stale_generation_reports_are_ignored_and_restarts_bump_the_generation():
    c = formed(max_restarts=1)
    [push] = pushes(c.report(1, 1, FAILED, failure(2, at=1.0)))
    assert push.world.status == RUNNING and push.world.generation == 2 and push.world.restart_count == 1
    assert c.report(0, 1, FAILED, failure(0, at=1.1)) == []
    [final] = pushes(c.report(0, 2, FAILED, failure(1, at=3.0)))
    assert final.world.status == FAILED and final.world.generation == 2 and final.world.exit_code == 11


def probes(actions) -> list[Probe]:
    return [a for a in actions if isinstance(a, Probe)]


def ticked(**kw) -> Coordinator:
    """A running 3-node world formed at time 0 with a 3 s TTL, ticked every 0.5 s up to 1.5 s."""
    c = formed(heartbeat_ttl=3.0, **kw)
    for t in (0.5, 1.0, 1.5):
        c.tick(t)
    return c


def test_a_delivered_push_counts_as_a_heartbeat_of_that_generation_only():
    c = ticked()
    c.delivered(1, 1, 1.9)
    c.delivered(2, 0, 1.9)
    assert [p.node.node_id for p in probes(c.tick(2.1))] == [2]


def test_with_a_majority_silent_each_is_probed_a_probe_timeout_before_its_ttl_and_kept_if_it_answers():
    """Nodes 1 and 2 silent together (this coordinator may be the one cut off): no quick probe
    (test_detection.py), the TTL's rule."""
    c = ticked()
    assert c.probe_timeout == 1.0
    assert not probes(c.tick(2.0))
    got = probes(c.tick(2.01))
    assert [p.node.node_id for p in got] == [1, 2]
    assert all(p.generation == 1 and p.timeout is None and "no heartbeat for 2 s" in p.reason for p in got)
    assert not probes(c.tick(2.5)), "one probe at a time per node"
    assert c.probed(got[0], True, got[0].reason, 2.6) == []
    assert c.probed(got[1], True, got[1].reason, 2.6) == []
    assert not probes(c.tick(3.0)) and c.world.generation == 1


def test_a_node_that_fails_its_probe_is_lost_at_once():
    c = ticked(min_workers=2)
    c.heartbeat(1, {}, 2.0)
    [probe] = probes(c.tick(2.01))
    [push] = pushes(c.probed(probe, False, "node 2 sent no heartbeat, and a direct probe failed: refused", 2.1))
    assert [n.node_id for n in push.world.nodes] == [0, 1]
    assert {m["node_id"]: m["state"] for m in c.snapshot(2.2)["members"]}[2] == "dead"


def test_a_refused_connection_probes_the_node_at_once():
    c = ticked()
    [probe] = c.suspect(1, "node 1 refused a call")
    assert probe.node.node_id == 1 and probe.reason == "node 1 refused a call"
    assert c.suspect(1, "again") == [], "already being probed"
    assert c.suspect(7, "not a member") == []


def test_a_probe_answer_for_an_older_world_is_ignored():
    c = ticked(max_workers=4)
    [probe] = c.suspect(1, "node 1 refused a call")
    c.register(node(3), 1.6)
    assert c.world.generation == 2
    assert c.probed(probe, False, "refused", 1.7) == []
    assert c.world.generation == 2 and c.world.has(1)


def test_only_the_topmost_silent_node_of_a_tree_branch_is_probed():
    # Width 3, threshold 4: 13 nodes, positions 2-4 report through position 1 (rendezvous/tree.py).
    c = Coordinator(settings(workers=13, heartbeat_ttl=3.0, tree_fanout=3, tree_threshold=4), now=0.0)
    for i in range(13):
        c.register(node(i), 0.0)
    for t in (0.5, 1.0, 1.5):
        c.tick(t)
    for i in (5, 6, 7, 8, 9, 10, 11, 12):
        c.heartbeat(i, {}, 2.0)
    assert [p.node.node_id for p in probes(c.tick(2.1))] == [1]
