"""A node that answers its coordinator's probe is heard by it (``lease``): for a TTL after its answer it
votes for no rival, stands against it nowhere and counts no votes of its own against it
(``election.Election.confirm``), so the coordinator that counts the answer and a rival that counts the
node's vote never both hold a majority."""

from __future__ import annotations

import pytest

from runtime.agent.rendezvous.actions import AnswerVote, MemberAction
from runtime.agent.rendezvous.election import Ballot, Election, Verdict
from runtime.agent.rendezvous.events import CoordinatorLost, Probed, VoteRequested, WorldArrived
from runtime.agent.rendezvous.member import Member
from runtime.agent.world import Node, World

pytestmark = pytest.mark.unit

TTL = 3.0


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
