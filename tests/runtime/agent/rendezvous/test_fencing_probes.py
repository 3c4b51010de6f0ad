"""A node that answers its coordinator's probe is heard by it (``lease``): for a TTL after its answer it
votes for no rival, stands against it nowhere and counts no votes of its own against it
(``election.Election.confirm``), so the coordinator that counts the answer and a rival that counts the
node's vote never both hold a majority; a coordinator lost for good after its probe is still voted out.
On a fake clock (``testbed.fencing``), then the rule's parts."""

from __future__ import annotations

import pytest

from runtime.agent.rendezvous.actions import AnswerVote, MemberAction
from runtime.agent.rendezvous.election import Ballot, Election, Verdict
from runtime.agent.rendezvous.events import CoordinatorLost, Probed, VoteRequested, WorldArrived
from runtime.agent.rendezvous.member import Member
from runtime.agent.world import Node, World
from testbed.fencing import STEP, SimJob

pytestmark = pytest.mark.unit

TTL = 3.0


def said(job: SimJob) -> list[list[str]]:
    return [n.said[-4:] for n in job.nodes]


def never_two_coordinators(job: SimJob, seconds: float) -> None:
    for _ in range(round(seconds / STEP)):
        job.run(STEP)
        assert len(job.coordinators()) == 1, (job.now, job.coordinators(), said(job))


@pytest.mark.parametrize("late", [0, 1])
def test_a_node_that_answered_the_resumed_coordinators_probe_grants_no_ballot_before_its_next_beat(late: int):
    """Node 0 of five stalls (SIGSTOP) past the TTL. Nodes 1 to 4 beat in step and count it lost in
    the same step; node 1 stands at once, refused (the others, later in that step, have not lost it
    yet), and asks again half a TTL later. Node 0 resumes in that step (or the one before), first:
    after its stall it trusts no beat and probes every node, each answers in epoch 1, and node 0
    counts all four heard. Node 1's ballot then reaches nodes 2 to 4 before their next beat does:
    had they granted it, node 1 would take over in epoch 2 with four votes while node 0, counting a
    majority heard, still coordinated epoch 1 (for two thirds of a TTL, until it probed again)."""
    job = SimJob(5)
    job.stopped.add(0)
    while not job.nodes[1].member.orphaned:
        job.run(STEP)
    job.run(TTL / 2 - 2 * STEP + late * STEP)
    job.stopped.clear()  # node 0 takes each step before node 1
    never_two_coordinators(job, 2 * TTL)
    assert job.coordinators() == [0] and all(not n.member.orphaned for n in job.nodes), said(job)


def test_nodes_whose_beats_are_lost_but_who_answer_probes_vote_in_no_second_coordinator():
    """The beats of nodes 1 to 4 stop reaching node 0 (its probes, and their ballots, still get
    through): node 0, with a majority unheard, holds and probes them, and each answer in epoch 1
    counts as a beat; a TTL on, their failed beats tell them node 0 is lost. Answering its probes
    (again before each answer's TTL has passed), they neither stand nor grant a ballot against it, so
    node 0's world goes on alone, its nodes orphaned (before, node 1 took over with their votes while
    node 0 still counted them heard)."""
    job = SimJob(5)
    job.beats_lost.update({1, 2, 3, 4})
    never_two_coordinators(job, 5 * TTL)
    assert job.coordinators() == [0] and job.nodes[1].member.orphaned, said(job)
    world = job.nodes[0].coordinator.world  # type: ignore[union-attr]
    assert world is not None and world.epoch == 1 and len(world.nodes) == 5
    assert job.running_worlds() == {world.order}


def test_a_coordinator_lost_for_good_after_its_probes_is_still_voted_out_a_ttl_after_the_last_one():
    """As above, then node 0 stops for good. Its last probe keeps nodes 1 to 4 from voting for a TTL
    after their answer, no longer: their beats had already told them it was lost (and say so only
    once), so node 1 stands once that TTL is over and takes over in epoch 2 with every survivor's vote."""
    job = SimJob(5)
    job.beats_lost.update({1, 2, 3, 4})
    job.run(3 * TTL)
    job.beats_lost.clear()
    job.stopped.add(0)
    stopped_at = job.now
    while job.coordinators() != [1] and job.now < stopped_at + 3 * TTL:
        job.run(STEP)
    assert job.coordinators() == [1], said(job)
    assert any("nodes 1, 2, 3, 4 confirmed it (4 of 5)" in line for line in job.nodes[1].said), said(job)
    assert job.now <= stopped_at + 2 * TTL, "node 0's last probe keeps its nodes from voting for a TTL, no longer"
    world = job.nodes[1].coordinator.world  # type: ignore[union-attr]
    assert world is not None and world.epoch == 2 and [n.node_id for n in world.nodes] == [1, 2, 3, 4]


# --- the rule's parts --------------------------------------------------------------------------


def a_world(epoch: int = 1, nodes: int = 5) -> World:
    return World(job="j", generation=3, restart_count=0, max_restarts=0, master_port=29500,
                 nodes=tuple(Node(i, f"10.0.0.{i}", 32300, 1) for i in range(nodes)),
                 coordinator=(0, "10.0.0.0", 32300), epoch=epoch)


def test_a_node_that_confirmed_its_coordinator_refuses_ballots_against_it_for_a_ttl():
    voter, world = Election(2, TTL), a_world()
    voter.lose(0, 10.0)
    answer = voter.confirm(0, 1, world, 11.0)
    assert answer.granted and answer.epoch == 1
    refused = voter.vote(Ballot(2, 1, 0, world.order), world, 11.0 + TTL - 0.01)
    assert not refused.granted and "answered coordinator node 0's probe" in refused.reason
    assert voter.promised == 0, "a refused ballot promises nothing"
    assert voter.vote(Ballot(2, 1, 0, world.order), world, 11.0 + TTL).granted, "lost still, once the TTL is over"


def test_a_node_that_voted_for_a_rival_answers_the_probe_with_the_rivals_epoch():
    voter, world = Election(2, TTL), a_world()
    voter.lose(0, 10.0)
    assert voter.vote(Ballot(2, 1, 0, world.order), world, 10.0).granted
    answer = voter.confirm(0, 1, world, 10.5)
    assert not answer.granted and answer.epoch == 2 and "knows epoch 2" in answer.reason
    assert not voter.heard(0, 10.5), "a coordinator so answered is deposed, not kept"


def test_a_candidate_that_confirmed_its_coordinator_neither_counts_its_votes_nor_stands_for_a_ttl():
    candidate, world = Election(1, TTL), a_world()
    candidate.lose(0, 10.0)
    ballot = candidate.due(world, 10.0)
    assert ballot is not None
    assert candidate.confirm(0, 1, world, 10.2).granted, "its own candidacy is no vote for a rival"
    assert not candidate.counted(ballot, 4, 1, world, 10.3), "heard by node 0 since it stood"
    assert candidate.due(world, 10.2 + TTL - 0.01) is None
    again = candidate.due(world, 10.2 + TTL)
    assert again == ballot, "the same ballot again (its voters, if any, deposed node 0 answering it)"
    assert candidate.counted(again, 3, 1, world, 10.2 + TTL + 0.1)


def test_a_node_that_won_answers_a_probe_of_the_coordinator_it_replaced_with_its_own_epoch():
    """Before its own world arrives, a new coordinator's world is still the old one: its answer must
    depose the old coordinator, not confirm it."""
    winner, world = Election(1, TTL), a_world()
    winner.lose(0, 10.0)
    ballot = winner.due(world, 10.0)
    assert ballot is not None and winner.counted(ballot, 3, 1, world, 10.1)
    answer = winner.confirm(0, 1, world, 10.2)
    assert not answer.granted and answer.epoch == 2


def test_a_member_answers_a_probe_in_order_with_the_ballots_it_answers():
    """``Member`` decides a probe as it decides a ballot (``POST /probe`` and ``POST /vote`` hand both to
    its loop, in the order they came): a ballot granted first shows in the probe's answer (its epoch
    deposes the coordinator); a ballot after the probe is refused."""
    world = a_world()
    first, then = member_of(2, world), member_of(3, world)
    verdicts: list[Verdict] = []
    for member in (first, then):
        member.handle(CoordinatorLost(world.coordinator, TTL + 0.1), 5.0)
    ballot = Ballot(2, 1, 0, world.order)
    answer(first.handle(VoteRequested(ballot, verdicts.append), 5.1))
    answer(first.handle(Probed(0, 1, verdicts.append), 5.2))
    answer(then.handle(Probed(0, 1, verdicts.append), 5.1))
    answer(then.handle(VoteRequested(ballot, verdicts.append), 5.2))
    assert [(v.granted, v.epoch) for v in verdicts] == [(True, 2), (False, 2), (True, 1), (False, 1)], verdicts
    assert (first.view.epoch, then.view.epoch) == (2, 1)


def member_of(node_id: int, world: World) -> Member:
    member = Member(node_id=node_id, local_world_size=1, elastic=True, signals_to_handle="SIGTERM", ttl=TTL,
                    quorum_timeout=60.0, coordinating=False)
    member.start(0.0)
    member.handle(WorldArrived(world), 0.0)
    return member


def answer(actions: tuple[MemberAction, ...]) -> None:
    [action] = actions
    assert isinstance(action, AnswerVote), actions
    action.reply(action.verdict)
