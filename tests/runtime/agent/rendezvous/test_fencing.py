"""One world at a time, on a fake clock without sockets (``testbed.fencing``: every node's real
``Member``, ``HeartbeatState`` and ``Coordinator``): a stalled or cut-off node, node 0 included,
never leaves two worlds running; the job goes on in the majority's world and the others rejoin it."""

from __future__ import annotations

import pytest

from runtime.agent.rendezvous.actions import Probe
from runtime.agent.rendezvous.coordinator import Coordinator
from runtime.agent.rendezvous.election import Ballot, Election, majority
from runtime.agent.rendezvous.lease import Lease
from runtime.agent.spec.status import SUCCEEDED
from runtime.agent.world import Node, World
from testbed.fencing import SimJob
from testbed.settings import agent_settings

pytestmark = pytest.mark.unit

TTL = 3.0


def world_of(job: SimJob, node_id: int) -> World:
    world = job.nodes[node_id].member.world
    assert world is not None, job.nodes[node_id].said
    return world


def members(world: World) -> list[int]:
    return [n.node_id for n in world.nodes]


def one_world(job: SimJob) -> World:
    """The job's one coordinator and the one world every running agent's ranks are in."""
    [holder] = job.coordinators()
    coordinator = job.nodes[holder].coordinator
    assert coordinator is not None and coordinator.world is not None
    assert job.running_worlds() == {coordinator.world.order}, [n.said for n in job.nodes]
    return coordinator.world


def settle(job: SimJob, nodes: int, seconds: float = 60.0) -> World:
    """Run until one coordinator's world holds all ``nodes`` nodes again (at most ``seconds``)."""
    for _ in range(int(seconds / TTL)):
        job.run(TTL)
        holders = job.coordinators()
        if len(holders) == 1:
            world = job.nodes[holders[0]].coordinator.world  # type: ignore[union-attr]
            if world is not None and len(world.nodes) == nodes and job.running_worlds() == {world.order}:
                return world
    raise AssertionError([n.said for n in job.nodes])


def test_a_job_forms_in_epoch_1():
    job = SimJob(3)
    world = one_world(job)
    assert members(world) == [0, 1, 2] and world.epoch == 1


@pytest.mark.parametrize("ttls", [0.5, 1, 2, 3, 4, 5])
def test_a_stalled_coordinator_leaves_one_world_and_rejoins_it(ttls: float):
    """SIGSTOP of node 0's agent for 0.5x to 5x the TTL: a short stall changes nothing; a longer one
    may elect node 1 (the majority, nodes 1 and 2, lost node 0), and then node 0, resumed, is fenced
    out by the newer epoch, stops its ranks and is admitted to node 1's world. Never two worlds."""
    job = SimJob(3)
    job.stopped.add(0)
    job.run(ttls * TTL)
    job.stopped.clear()
    world = settle(job, 3)
    assert members(world) == [0, 1, 2]
    if ttls <= 1:
        assert world.epoch == 1 and job.coordinators() == [0], "a stall within the TTL is no loss"
    if world.epoch > 1:
        assert job.coordinators() == [1]
        assert any("fenced out" in line for line in job.nodes[0].said), job.nodes[0].said
    assert all(n.exit_code is None for n in job.nodes)


def test_a_coordinator_stalled_past_the_ttl_is_replaced_in_epoch_2_with_a_majoritys_votes():
    job = SimJob(3)
    job.stopped.add(0)
    job.run(4 * TTL)
    assert job.coordinators() == [1], "node 0, stopped, knows nothing yet"
    new = job.nodes[1].coordinator
    assert new is not None and new.world is not None
    assert (members(new.world), new.world.epoch) == ([1, 2], 2)
    assert any("nodes 1, 2 confirmed it (2 of 3)" in line for line in job.nodes[1].said), job.nodes[1].said
    assert world_of(job, 2).epoch == 2


@pytest.mark.parametrize("cut", [0, 1, 2])
def test_a_node_cut_off_for_10_s_never_runs_a_second_world_and_rejoins(cut: int):
    """Any node's link down for 10 s (3.3 TTLs), node 0 included: the side with a majority goes on,
    the cut-off node takes over nothing (a lone node is no majority); once healed it rejoins."""
    job = SimJob(3)
    job.cut.add(cut)
    job.run(10.0)
    majority_side = [i for i in range(3) if i != cut]
    holders = [i for i in job.coordinators() if i != cut]
    assert len(holders) == 1, [n.said for n in job.nodes]
    assert members(job.nodes[holders[0]].coordinator.world) == majority_side  # type: ignore[union-attr]
    assert job.nodes[cut].coordinator is None or cut == 0, "a cut-off node never takes over"
    job.cut.clear()
    world = settle(job, 3)
    assert members(world) == [0, 1, 2] and all(n.exit_code is None for n in job.nodes)


def test_a_cut_off_coordinator_holds_its_decisions_and_fails_nothing():
    """Node 0 cut off: it does not lose nodes 1 and 2 (that would fail the job, min 2) but holds,
    then steps down after a TTL without a majority; nodes 1 and 2 go on in epoch 2."""
    job = SimJob(3)
    job.cut.add(0)
    job.run(10.0)
    assert job.nodes[0].coordinator is None
    assert any("no majority of the world answered" in line for line in job.nodes[0].said), job.nodes[0].said
    assert not any("job failed" in line for line in job.nodes[0].said)
    assert world_of(job, 2).epoch == 2 and members(world_of(job, 2)) == [1, 2]


def test_a_tree_worlds_lost_coordinator_is_replaced_with_the_votes_of_nodes_that_beat_to_parents():
    """13 nodes in a width-3 tree: 9 of them beat to a tree parent, not the coordinator, so without
    their votes no majority (7) could form. Node 0 stops: its children count it lost, their subtrees
    hear so from them (the parents' answers say how long the coordinator has not heard them), and
    node 1 takes over in epoch 2 with every survivor's vote; node 0, resumed, rejoins that world."""
    job = SimJob(13, width=3, threshold=4)
    assert len(world_of(job, 12).nodes) == 13
    job.stopped.add(0)
    job.run(4 * TTL)
    assert job.coordinators() == [1], [n.said for n in job.nodes]
    assert any("12 of 13" in line for line in job.nodes[1].said), job.nodes[1].said
    leaf = job.nodes[12].said
    assert any("so says its tree parent" in line for line in leaf), leaf
    assert (world_of(job, 12).epoch, members(world_of(job, 12))) == (2, list(range(1, 13)))
    job.stopped.clear()
    world = settle(job, 13)
    assert world.epoch == 2 and job.coordinators() == [1]


def test_a_double_failure_elects_the_next_in_line():
    """Nodes 0 and 1 of five stop for good: node 2 stands one TTL after node 1 would have, and the
    three survivors (a majority of five) go on in epoch 2 with node 2 coordinating."""
    job = SimJob(5)
    job.stopped.update({0, 1})
    job.run(8 * TTL)
    world = one_world(job)
    assert job.coordinators() == [2] and world.epoch == 2 and members(world) == [2, 3, 4]


def test_a_minority_never_takes_over():
    """Nodes 0 and 1 of three stop: node 2 alone is no majority; it trains on, orphaned."""
    job = SimJob(3)
    job.stopped.update({0, 1})
    job.run(6 * TTL)
    assert job.nodes[2].coordinator is None and world_of(job, 2).epoch == 1
    assert job.nodes[2].member.orphaned


def test_a_two_node_world_waits_for_its_coordinator():
    job = SimJob(2, min_workers=1)
    job.stopped.add(0)
    job.run(3 * TTL)
    assert job.nodes[1].coordinator is None and job.nodes[1].member.orphaned
    job.stopped.clear()
    job.run(2 * TTL)
    world = one_world(job)
    assert world.epoch == 1 and members(world) == [0, 1] and not job.nodes[1].member.orphaned


def test_after_a_failover_the_job_succeeds_on_every_node_that_took_part():
    job = SimJob(3)
    job.stopped.add(0)
    job.run(4 * TTL)
    job.stopped.clear()
    world = settle(job, 3)
    for i in range(3):
        job.exit_ranks(i, 0)
    job.run(TTL)
    assert [n.exit_code for n in job.nodes] == [0, 0, 0], [n.said for n in job.nodes]
    assert all(n.member.world is not None and n.member.world.status == SUCCEEDED for n in job.nodes)
    assert world.epoch == 2


# --- the rule's parts --------------------------------------------------------------------------


def a_world(epoch: int = 1, generation: int = 3, nodes: int = 3) -> World:
    return World(job="j", generation=generation, restart_count=0, max_restarts=0, master_port=29500,
                 nodes=tuple(Node(i, f"10.0.0.{i}", 32300, 1) for i in range(nodes)),
                 coordinator=(0, "10.0.0.0", 32300), epoch=epoch)


def elastic_coordinator(nodes: int = 3) -> Coordinator:
    """Node 0's coordinator of an elastic job (min 2) running :func:`a_world` of ``nodes`` nodes, from time 0."""
    settings = agent_settings(job_name="j", node_id=0, workers=nodes, min_workers=2, max_workers=nodes,
                              heartbeat_ttl=TTL, heartbeat_interval=TTL / 12)
    return Coordinator(settings, 0.0, world=a_world(nodes=nodes))


def resume_after_a_stall(c: Coordinator, last_tick: float, resumed: float) -> None:
    """``c`` ticks at ``last_tick``, stalls (SIGSTOP) and, at ``resumed``, reads the beats nodes 1 and 2 sent
    meanwhile, before its next tick."""
    c.tick(last_tick)
    for late in (1, 2):
        c.heartbeat(late, {}, resumed)


def test_a_voter_grants_one_candidate_per_epoch_and_only_once_it_lost_the_coordinator_itself():
    voter, world = Election(2, TTL), a_world()
    ballot = Ballot(2, 1, 0, world.order)
    still = voter.vote(ballot, world, 10.0)
    assert not still.granted and "still hears coordinator node 0" in still.reason
    voter.lose(0, 10.0)
    assert voter.vote(ballot, world, 10.0).granted
    assert voter.vote(ballot, world, 10.0).granted, "the same candidate may ask again"
    rival = voter.vote(Ballot(2, 3, 0, world.order), world, 10.0)
    assert not rival.granted and "voted for node 1 in epoch 2" in rival.reason
    newer = voter.vote(Ballot(3, 1, 0, (1, 2)), world, 10.0)
    assert not newer.granted and newer.world == world, "an older world's candidate gets the newer world"


def test_candidates_stand_in_node_order_one_ttl_apart():
    world = a_world(nodes=5)
    first, second = Election(1, TTL), Election(2, TTL)
    first.lose(0, 10.0)
    second.lose(0, 10.0)
    assert first.due(world, 10.0) == Ballot(2, 1, 0, world.order)
    assert second.due(world, 10.0 + TTL - 0.1) is None
    assert second.due(world, 10.0 + TTL) is not None
    assert majority(5) == 3 and majority(3) == 2 and majority(2) == 2


def test_a_coordinator_without_its_lease_holds_reports_and_replays_them_once_heard_again():
    c = elastic_coordinator()
    for tick in range(1, 6):
        c.tick(tick * TTL / 6)  # awake all along: its nodes are silent, not its clock
    assert c.report(1, 3, SUCCEEDED, now=TTL) == [], "nodes 1 and 2 unheard: a rival may be elected"
    c.heartbeat(1, {}, TTL + 0.1)
    c.heartbeat(2, {}, TTL + 0.1)
    c.report(2, 3, SUCCEEDED, now=TTL + 0.2)
    c.report(0, 3, SUCCEEDED, now=TTL + 0.2)
    assert c.world is not None and c.world.status != SUCCEEDED, "node 1's report is still held"
    actions = c.tick(TTL + 0.3)
    assert c.world is not None and c.world.status == SUCCEEDED, actions


def test_a_probe_answered_in_a_newer_epoch_fences_the_coordinator_out_and_a_vote_elsewhere_is_no_beat():
    c = elastic_coordinator()
    c.heartbeat(1, {}, TTL, epoch=2)
    c.heartbeat(2, {}, TTL, epoch=2)
    probes = c.tick(TTL)
    assert sorted(p.node.node_id for p in probes) == [1, 2], "both voted elsewhere: the coordinator holds and asks"
    [step_down] = c.probed(probes[0], True, "", TTL + 0.1, epoch=2, coordinator=("10.0.0.1", 32300))
    assert type(step_down).__name__ == "StepDown" and step_down.address == ("10.0.0.1", 32300)
    assert "knows epoch 2" in step_down.reason and c.snapshot(TTL + 0.1)["status"] == "fenced"
    assert c.tick(TTL + 0.2) == [], "it steps down once"


def test_a_fixed_size_or_small_job_never_holds():
    lease = Lease(0, epoch=1, ttl=TTL, margin=1.0, elastic=False)
    assert not lease.holding(a_world(), lambda _i: 100.0, 0.0)
    assert not Lease(0, epoch=1, ttl=TTL, margin=1.0, elastic=True).holding(a_world(nodes=2), lambda _i: 100.0, 0.0)


@pytest.mark.parametrize("epoch", [1, 2])
def test_after_its_own_stall_a_coordinator_counts_only_fresh_probe_answers_not_the_requests_that_waited(epoch: int):
    """Beats and reports its nodes sent during a SIGSTOP wait in its socket and are read when it
    resumes, though their nodes may have voted for a rival since: they are held until each node
    answers a probe sent after the stall. Answered in its epoch, they are taken; in a newer one, the
    coordinator steps down and its stale verdict is never decided."""
    c, resumed = elastic_coordinator(), 0.5 + 3 * TTL
    resume_after_a_stall(c, 0.5, resumed)
    for late in (1, 2):
        assert c.report(late, 3, SUCCEEDED, now=resumed) == [], "read late: held"
    c.report(0, 3, SUCCEEDED, now=resumed)
    probes = c.tick(resumed + 0.01)
    assert sorted(p.node.node_id for p in probes if isinstance(p, Probe)) == [1, 2], probes
    assert c.world is not None and c.world.status != SUCCEEDED
    answers = [c.probed(p, True, "", resumed + 0.1, epoch=epoch, coordinator=("10.0.0.1", 32300)) for p in probes]
    c.tick(resumed + 0.2)
    if epoch == 1:
        assert c.world is not None and c.world.status == SUCCEEDED, answers
    else:
        assert c.lease.deposed is not None and c.world is not None and c.world.status != SUCCEEDED, answers


def test_a_coordinator_whose_main_thread_is_busy_past_a_ttl_while_beats_are_answered_has_not_stalled():
    """Its ranks slow to stop at a restart, the coordinator's main thread ticks no more for a while, but its routes
    answer every beat: its nodes hear it, so no rival can be elected, and it neither holds its decisions nor probes
    them all again as after a stall (only a host that answered nothing for a TTL has stalled); a node silent
    meanwhile is still found at its next tick."""
    c, t = elastic_coordinator(), 0.5
    c.tick(t)
    while t < 0.5 + 3 * TTL:
        t += 0.25
        c.heartbeat(1, {}, t)
    probes = [a for a in c.tick(t + 0.01) if isinstance(a, Probe)]
    assert [p.node.node_id for p in probes] == [2] and not probes[0].confirming, probes
    assert not c.lease.holding(c.world, lambda i: c.liveness.age(i, t + 0.01), t + 0.01)


def test_after_its_own_stall_a_refused_probe_sent_before_its_first_tick_loses_nobody():
    """Resumed after a SIGSTOP, a coordinator reads the beats that waited in its socket and its watch reports
    a node's connection closed, both before its first tick: the probe that follows is refused (the node's
    agent is gone, as is the job, finished by a successor). The stall counts before that answer does: the
    coordinator holds (it loses nobody, announces no failure) and asks again. Found in CI: a fenced-out node
    0 announced "job failed" for a job its successor had finished."""
    c, resumed = elastic_coordinator(), 0.5 + 3 * TTL
    resume_after_a_stall(c, 0.5, resumed)
    [probe] = c.suspect(2, "its agent closed the watch's connection to its agent port")
    assert c.probed(probe, False, "connection refused", resumed + 0.01) == []
    assert c.world is not None and c.world.generation == 3 and len(c.world.nodes) == 3
    probes = c.tick(resumed + 0.02)
    assert sorted(p.node.node_id for p in probes if isinstance(p, Probe) and p.confirming) == [1, 2], probes


@pytest.mark.parametrize("late", [0.0, 1.2])
def test_a_probe_answer_counts_as_heard_from_when_it_was_asked_however_late_it_is_read(late: float):
    """A node that answers a probe votes for no rival for a TTL from its answer (``Election.confirm``); the
    coordinator may count it heard for ``ttl - margin``. Counted from when the answer is read, a coordinator
    whose loop read it late (GIL starvation, a pause shorter than a stall) could still count the node heard
    after its vote was free again: two coordinators (found in review, in a SimJob of five). Counted from
    when the probe was asked, the coordinator's window ends first, whenever the answer is read."""
    c = elastic_coordinator(5)
    probes: list = []
    asked = 0.0
    while not probes:
        asked += TTL / 6
        probes = [p for p in c.tick(asked) if isinstance(p, Probe)]
    assert sorted(p.node.node_id for p in probes) == [1, 2, 3, 4] and all(p.asked == asked for p in probes)
    for probe in probes:
        c.probed(probe, True, "", asked + late, epoch=1)
    world = c.world
    assert world is not None
    still = asked + TTL - c.probe_timeout - 0.05
    assert not c.lease.holding(world, lambda i: c.liveness.age(i, still), still)
    after = asked + TTL - c.probe_timeout + 0.05
    assert c.lease.holding(world, lambda i: c.liveness.age(i, after), after), "heard no longer than ttl - margin"


def test_a_probe_that_only_confirmed_the_lease_loses_nobody_and_a_node_still_silent_is_probed_again():
    """The whole fleet stalls (1,024 nodes on two cores did): the coordinator holds and probes every
    unheard node to confirm its lease. Three answer; node 4's confirming probe times out after the hold
    has ended: that loses nothing, as the fleet may have been stalled, but node 4, still silent, is
    probed again by the silence rule, and that probe's failure loses it."""
    c = elastic_coordinator(5)
    probes = []
    for tick in range(1, 7):
        probes += c.tick(tick * TTL / 6)
    assert probes and all(p.confirming for p in probes), probes
    by_node = {p.node.node_id: p for p in probes}
    assert sorted(by_node) == [1, 2, 3, 4]
    for node_id in (1, 2, 3):
        assert c.probed(by_node[node_id], True, "", TTL + 0.1, epoch=1) == []
    assert c.probed(by_node[4], False, "timed out", TTL + 0.2) == []
    assert c.world is not None and c.world.generation == 3, "a confirming probe's failure loses nobody"
    again: list = []
    now = TTL + 0.2
    while not again and now < 3 * TTL:
        now += 0.1
        for node_id in (1, 2, 3):
            c.heartbeat(node_id, {}, now)
        again = [a for a in c.tick(now) if isinstance(a, Probe)]
    [probe] = again
    assert probe.node.node_id == 4 and not probe.confirming
    actions = c.probed(probe, False, "timed out", now + 0.1)
    assert c.world is not None and c.world.generation == 4 and not c.world.has(4), actions
