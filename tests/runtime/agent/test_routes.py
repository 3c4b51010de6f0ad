"""The agent's membership routes called directly: membership refusals become 400 and 409 here, and
nowhere else; a parent keeps its children's beats; worlds are checked and relayed."""

from __future__ import annotations

import json
import time
from typing import Callable

import pytest

from runtime.agent import contract
from runtime.agent.errors import HttpError
from runtime.agent.net.server import Request
from runtime.agent.rendezvous.actions import Probe
from runtime.agent.rendezvous.coordinator import Coordinator
from runtime.agent.rendezvous.coordinator_lock import Coordination
from runtime.agent.rendezvous.election import Verdict
from runtime.agent.rendezvous.events import Event, Probed
from runtime.agent.rendezvous.forming import LAST_CALL
from runtime.agent.rendezvous.heartbeat import HeartbeatState, HeartbeatTiming, Liveness
from runtime.agent.rendezvous.nodestate import MemberView
from runtime.agent.rendezvous.push import WorldPusher
from runtime.agent.rendezvous.stragglers import SubtreeRanks
from runtime.agent.rendezvous.suspicions import MAX_REASON, Suspicions
from runtime.agent.rendezvous.suspicions import parse as parse_suspects
from runtime.agent.routes import AgentRoutes, Counters
from runtime.agent.world import Node, World
from testbed.settings import agent_settings
from testbed.transport import FakeNetwork, FakeTransport

pytestmark = pytest.mark.unit


def node_body(node_id: int, state: str = "joining", **extra: object) -> dict:
    return {"node_id": node_id, "addr": f"10.0.0.{node_id}", "port": 32300, "num_proc": 1, "state": state, **extra}


def routes(coordinating: bool, world: World | None = None, node_id: int = 0, elastic: bool = True,
           subtree: SubtreeRanks | None = None, upstream: float = 0.0, loop: Callable[[Event], None] | None = None,
           suspected: Callable[[dict[int, str]], None] = lambda _s: None):
    bounds = {"min_workers": 1, "max_workers": 2, "quorum_workers": 1} if elastic else {}
    settings = agent_settings(job_name="j", node_id=node_id, workers=2, **bounds)
    coordination = Coordination(Coordinator(settings, 0.0) if coordinating else None)
    network = FakeNetwork()
    pusher = WorldPusher(node_id=node_id, transport=FakeTransport(network, "token"), width=50, threshold=100, ttl=3.0,
                         clock=lambda: 0.0, say=lambda _l: None, delivered=lambda *_a: None, refused=lambda _n: None)
    decided, arrived, children = [], [], Liveness()
    view = MemberView(world, ("", 32300), registered=True, coordinating=coordinating, epoch=world.epoch if world else 1)
    agent = AgentRoutes(settings=settings, view=lambda: view, coordination=coordination, children=children,
                        upstream=lambda _now: upstream, pusher=pusher, actions=decided.extend,
                        arrived=loop or arrived.append,
                        counters=Counters(lambda: 7, lambda: pusher.sent, lambda: None), clock=lambda: 1.0,
                        subtree=subtree, suspected=suspected)
    return agent, coordination, decided, arrived, children


def put(agent: AgentRoutes, body: dict) -> dict:
    return dict(agent.member(Request("PUT", contract.ROUTE_MEMBERS, body, "peer")).body)


def test_a_node_outside_the_job_is_answered_400_and_a_late_one_409():
    agent, coordination, decided, _, _ = routes(coordinating=True)
    with pytest.raises(HttpError) as outside:
        put(agent, node_body(5))
    assert outside.value.status == 400 and "outside this job's 0..1" in str(outside.value)
    assert put(agent, node_body(0)) == {"generation": 0}
    coordination.decide(lambda c: c.tick(1.0 + LAST_CALL))
    grown = put(agent, node_body(1))
    assert grown["generation"] == 2, "an elastic job admits the late node in a new generation"
    assert any(type(a).__name__ == "Push" for a in decided)
    fixed, _, _, _, _ = routes(coordinating=True, elastic=False)  # its quorum is every node
    put(fixed, node_body(0))
    put(fixed, node_body(1))
    with pytest.raises(HttpError) as late:
        put(fixed, {**node_body(1), "addr": "10.0.0.99"})  # node 1 replaced after the world formed
    assert late.value.status == 409 and "formed at generation 1 without node 1" in str(late.value)


def test_a_beat_from_outside_the_coordinators_world_is_answered_409_register_again():
    agent, coordination, _, _, _ = routes(coordinating=True)
    put(agent, node_body(0))
    coordination.decide(lambda c: c.tick(1.0 + LAST_CALL))
    with pytest.raises(HttpError) as info:
        put(agent, node_body(1, state="alive", generation=1))
    assert info.value.status == 409 and "register again" in str(info.value)


def test_registration_and_reports_go_to_the_coordinator_only():
    agent, _, _, _, _ = routes(coordinating=False, node_id=1)
    with pytest.raises(HttpError) as info:
        put(agent, node_body(1))
    assert info.value.status == 404
    with pytest.raises(HttpError) as bad:
        put(agent, {"node_id": "x"})
    assert bad.value.status == 400


def test_a_parent_keeps_its_childrens_beats_and_sends_a_newer_world_back():
    world = World(job="j", generation=3, restart_count=0, max_restarts=0, master_port=29500,
                  nodes=(Node(0, "10.0.0.0", 32300, 1), Node(1, "10.0.0.1", 32300, 1)))
    agent, _, _, _, children = routes(coordinating=False, world=world, node_id=0)
    reply = put(agent, node_body(1, state="alive", generation=2, ages={"1": 0.5}))
    assert reply["generation"] == 3 and World.from_json(reply["world"]) == world
    assert "upstream_s" not in reply, "a parent ahead of the child sends its world, not its coordinator's news"
    assert children.age(1, 1.0) == pytest.approx(0.0)
    with pytest.raises(HttpError) as info:
        put(agent, node_body(7, state="alive", generation=3))
    assert info.value.status == 409


def test_a_newer_world_sent_back_with_a_beat_is_encoded_once_per_world():
    world = World(job="j", generation=3, restart_count=0, max_restarts=0, master_port=29500,
                  nodes=(Node(0, "10.0.0.0", 32300, 1), Node(1, "10.0.0.1", 32300, 1)))
    agent, _, _, _, _ = routes(coordinating=False, world=world, node_id=0)
    first, second = (agent.member(Request("PUT", contract.ROUTE_MEMBERS, node_body(1, state="alive", generation=g),
                                          "peer")) for g in (1, 2))
    assert first.encoded is not None and json.loads(first.encoded) == dict(first.body)
    assert World.from_json(json.loads(first.encoded)["world"]) == world
    assert world.encoded() is world.encoded(), "encoded once, then reused"
    assert second.encoded == first.encoded
    current = agent.member(Request("PUT", contract.ROUTE_MEMBERS, node_body(1, state="alive", generation=3), "peer"))
    assert current.encoded is None and dict(current.body) == {"generation": 3, "upstream_s": 0.0}


def test_a_parent_answers_with_how_long_ago_the_coordinator_heard_it_and_the_coordinator_does_not():
    """A tree parent's answer carries its own silence toward the coordinator (in the reply's encoded bytes too),
    so its children count a coordinator lost above it; the coordinator's answers carry none."""
    world = World(job="j", generation=3, restart_count=0, max_restarts=0, master_port=29500,
                  nodes=(Node(0, "10.0.0.0", 32300, 1), Node(1, "10.0.0.1", 32300, 1)))
    parent, _, _, _, _ = routes(coordinating=False, world=world, node_id=0, upstream=3.25)
    assert put(parent, node_body(1, state="alive", generation=3)) == {"generation": 3, "upstream_s": 3.25}
    behind = parent.member(Request("PUT", contract.ROUTE_MEMBERS, node_body(1, state="alive", generation=1), "peer"))
    assert behind.encoded is not None and "upstream_s" not in json.loads(behind.encoded)
    assert World.from_json(json.loads(behind.encoded)["world"]) == world
    behind_child, _, _, _, _ = routes(coordinating=False, world=None, node_id=0, upstream=9.0)
    assert put(behind_child, node_body(1, state="alive", generation=3)) == {"generation": 0}, \
        "a parent without the child's world says nothing of the coordinator"
    coordinator, coordination, _, _, _ = routes(coordinating=True)
    put(coordinator, node_body(0))
    coordination.decide(lambda c: c.tick(1.0 + LAST_CALL))
    assert "upstream_s" not in put(coordinator, node_body(0, state="alive", generation=1, to_coordinator=True))


def test_a_parent_keeps_no_news_of_a_child_that_voted_for_another_candidate():
    """A child whose beat carries an epoch past its parent's gave its vote to a rival: forwarded, its age
    would count at the old coordinator as a node still heard (the fencing rule's overlap)."""
    world = World(job="j", generation=3, restart_count=0, max_restarts=0, master_port=29500,
                  nodes=(Node(0, "10.0.0.0", 32300, 1), Node(1, "10.0.0.1", 32300, 1), Node(2, "10.0.0.2", 32300, 1)))
    agent, _, _, _, children = routes(coordinating=False, world=world, node_id=0)
    assert put(agent, node_body(1, state="alive", generation=3, epoch=2, ages={"2": 0.5}))["generation"] == 3
    assert children.age(1, 1.0) == float("inf") and children.age(2, 1.0) == float("inf")
    put(agent, node_body(1, state="alive", generation=3, epoch=1, ages={"2": 0.5}))
    assert children.age(1, 1.0) == pytest.approx(0.0) and children.age(2, 1.0) == pytest.approx(0.5)


def test_a_beat_to_the_coordinator_at_a_node_that_does_not_coordinate_is_refused_404():
    """A coordinator that stepped down (fenced out, or given up) must not answer the beats of the nodes
    that still take it for their coordinator: answered, they would never count it lost, and no majority
    could elect another. A beat to it as a tree
    parent is still its to keep."""
    world = World(job="j", generation=3, restart_count=0, max_restarts=0, master_port=29500,
                  nodes=(Node(0, "10.0.0.0", 32300, 1), Node(1, "10.0.0.1", 32300, 1)))
    agent, _, _, _, children = routes(coordinating=False, world=world, node_id=0)
    with pytest.raises(HttpError) as info:
        put(agent, node_body(1, state="alive", generation=3, to_coordinator=True))
    assert info.value.status == 404 and "node 0 does not coordinate" in str(info.value)
    assert children.age(1, 1.0) == float("inf"), "not kept as a child's beat"
    assert put(agent, node_body(1, state="alive", generation=3, to_coordinator=False))["generation"] == 3


def test_a_world_of_another_job_is_refused_and_one_of_this_job_taken():
    agent, _, _, arrived, _ = routes(coordinating=False, node_id=1)
    ours = World(job="j", generation=1, restart_count=0, max_restarts=0, master_port=29500,
                 nodes=(Node(0, "10.0.0.0", 32300, 1), Node(1, "10.0.0.1", 32300, 1)))
    other = World.from_json({**ours.to_json(), "job": "k"})
    with pytest.raises(HttpError) as info:
        agent.world(Request("POST", contract.ROUTE_WORLD, other.to_json(), "peer"))
    assert info.value.status == 409
    assert agent.world(Request("POST", contract.ROUTE_WORLD, ours.to_json(), "peer")).body == {"accepted": 1}
    assert [e.world for e in arrived] == [ours]
    assert agent.info(Request("GET", contract.ROUTE_INFO, {}, "peer")).body["requests_served"] == 7


def test_a_tree_parent_forwards_its_subtrees_ranks_and_the_coordinator_names_a_hung_one():
    """Issue 20 item 4: in tree mode only the coordinator's direct children beat to it, so their
    beats carry their subtrees' ranks; a hung rank two hops down is named."""
    world = World(job="j", generation=1, restart_count=0, max_restarts=0, master_port=29500,
                  nodes=tuple(Node(i, f"10.0.0.{i}", 32300, 1) for i in range(3)))
    subtree = SubtreeRanks()
    parent, _, _, _, _ = routes(coordinating=False, world=world, node_id=1, subtree=subtree)
    put(parent, node_body(2, state="alive", generation=1, ranks=[[2, None, 40.0]], subtree_ranks={"9": "junk"}))
    forwarded = subtree.forward(3.0, world.has)
    assert forwarded == {"2": [[2, None, 42.0]]}, "aged by the 2 s held; a node outside the world dropped"
    agent, coordination, _, _, _ = routes(coordinating=True)
    put(agent, node_body(0))
    coordination.decide(lambda c: c.tick(1.0 + LAST_CALL))
    put(agent, node_body(1))
    grown = coordination.use(lambda c: c.world)
    assert grown is not None
    put(agent, node_body(1, state="alive", generation=grown.generation, ranks=[[1, 0, 0.0]],
                        subtree_ranks={"0": [[0, None, 50.0]]}))
    said = coordination.use(lambda c: c.stragglers.check(grown, 1.0 + c.stragglers.hang_report_after))
    assert said is not None and any("rank 0 on node 0" in line for line in said[0]), said


def test_a_probe_is_answered_with_what_the_nodes_loop_decided_and_one_it_did_not_decide_in_time_says_so():
    """``POST /probe`` waits for the node's loop (``Member``, in order with its ballots: ``voting.confirm``),
    so it runs off the server's loop; a loop too busy to decide within half the probe's time gets the node's
    epoch answered as undecided (it counts for nothing at the coordinator: ``push.Prober``)."""
    world = World(job="j", generation=3, restart_count=0, max_restarts=0, master_port=29500,
                  nodes=(Node(0, "10.0.0.0", 32300, 1), Node(1, "10.0.0.1", 32300, 1)),
                  coordinator=(0, "10.0.0.0", 32300))
    verdicts = iter([Verdict(True, "", 1), Verdict(False, "node 1 knows epoch 2", 2)])
    seen: list[Event] = []

    def loop(event: Event) -> None:
        seen.append(event)
        assert isinstance(event, Probed)
        event.reply(next(verdicts))

    agent, _, _, _, _ = routes(coordinating=False, world=world, node_id=1, loop=loop)
    probe = {"prober": 0, "epoch": 1, "within": 1.0}
    assert agent.probe(Request("POST", contract.ROUTE_PROBE, probe, "peer")).body == {
        "epoch": 1, "decided": True, "world_coordinator": [0, "10.0.0.0", 32300]}
    assert [(e.prober, e.epoch) for e in seen if isinstance(e, Probed)] == [(0, 1)]
    assert agent.probe(Request("POST", contract.ROUTE_PROBE, probe, "peer")).body["epoch"] == 2
    assert ("POST", contract.ROUTE_PROBE) in agent.routes() and ("POST", contract.ROUTE_PROBE) not in agent.on_loop()
    busy, _, _, arrived, _ = routes(coordinating=False, world=world, node_id=1)
    started = time.monotonic()
    undecided = busy.probe(Request("POST", contract.ROUTE_PROBE, {**probe, "within": 0.2}, "peer")).body
    assert undecided == {"epoch": 1, "decided": False, "world_coordinator": [0, "10.0.0.0", 32300]}
    assert 0.09 <= time.monotonic() - started < 1.0 and len(arrived) == 1, "half of within, waiting for the loop"
    for bad in ({"epoch": 1, "within": 1.0}, {**probe, "within": "soon"}, {**probe, "within": -1.0}):
        with pytest.raises(HttpError) as info:
            busy.probe(Request("POST", contract.ROUTE_PROBE, bad, "peer"))
        assert info.value.status == 400 and "bad probe" in str(info.value)


def test_suspects_in_a_beat_are_probed_by_the_coordinator_and_passed_up_by_a_parent():
    """A tree parent's beat names a child whose agent port said its agent is gone: the coordinator probes it at
    once, naming who saw it (the probe decides); a parent below the coordinator passes the suspicion up
    instead, even for a child whose beat it does not count; a malformed one is refused at the boundary."""
    coordinator, coordination, decided, _, _ = routes(coordinating=True)
    put(coordinator, node_body(0))
    put(coordinator, node_body(1))
    coordination.decide(lambda c: c.tick(1.0 + LAST_CALL))
    decided.clear()
    put(coordinator, node_body(0, state="alive", generation=1, to_coordinator=True,
                               suspects={"1": "its agent closed the watch's connection to its agent port"}))
    [probe] = [a for a in decided if isinstance(a, Probe)]
    assert probe.node.node_id == 1 and "(seen by node 0, its tree parent or above)" in probe.reason
    world = World(job="j", generation=3, restart_count=0, max_restarts=0, master_port=29500,
                  nodes=(Node(0, "10.0.0.0", 32300, 1), Node(1, "10.0.0.1", 32300, 1)))
    passed: list[dict[int, str]] = []
    parent, _, parent_decided, _, _ = routes(coordinating=False, world=world, node_id=0, suspected=passed.append)
    put(parent, node_body(1, state="alive", generation=3, suspects={"7": "refused"}))
    assert passed == [{7: "refused"}] and parent_decided == []
    put(parent, node_body(1, state="alive", generation=3, epoch=world.epoch + 1, suspects={"6": "reset"}))
    assert passed[-1] == {6: "reset"}, "a child of a newer epoch: its beat does not count here, its suspicion goes up"
    for bad in ({"x": "why"}, {"7": 5}, ["7"]):
        with pytest.raises(HttpError) as info:
            put(parent, node_body(1, state="alive", generation=3, suspects=bad))
        assert info.value.status == 400 and "suspects must map node ids to reasons" in str(info.value)


def test_suspects_of_a_beat_recorded_as_the_role_is_given_up_go_up_instead(monkeypatch: pytest.MonkeyPatch):
    """The beat was recorded while this node coordinated; the role is gone when its suspects are decided on
    (``Coordination.attempt`` says ``None``): they go up with this node's next beat, not nowhere."""
    passed: list[dict[int, str]] = []
    coordinator, coordination, decided, _, _ = routes(coordinating=True, suspected=passed.append)
    put(coordinator, node_body(0))
    put(coordinator, node_body(1))
    coordination.decide(lambda c: c.tick(1.0 + LAST_CALL))
    decided.clear()
    monkeypatch.setattr(coordination, "attempt", lambda _decision: None)
    put(coordinator, node_body(1, state="alive", generation=1, to_coordinator=True, suspects={"0": "reset"}))
    assert passed == [{0: "reset"}] and decided == []


def test_suspicions_keep_the_first_reason_until_taken():
    held = Suspicions()
    held.merge({3: "refused"})
    held.merge({3: "reset", 4: "x" * (MAX_REASON + 50)})
    taken = held.take()
    assert taken[3] == "refused" and len(taken[4]) == MAX_REASON
    assert held.take() == {}
    assert parse_suspects(None) == {} and parse_suspects({"2": "why"}) == {2: "why"}


def test_a_tree_parent_watches_the_nodes_that_beat_to_it_and_the_coordinator_and_a_flat_world_none():
    nodes = tuple(Node(i, f"10.0.0.{i}", 32300, 1) for i in range(6))
    world = World(job="j", generation=1, restart_count=0, max_restarts=0, master_port=29500, nodes=nodes)
    timing = HeartbeatTiming(1.0, 4.0)

    def watched(node_id: int, of: World = world, threshold: int = 1) -> list[int]:
        return [n.node_id for n in HeartbeatState(timing, node_id, width=2, threshold=threshold,
                                                  now=0.0).children(of)]

    assert watched(1) == [2, 3] and watched(4) == [5]
    assert watched(0) == [] and watched(1, threshold=100) == [] and watched(9) == []
    moved = World.from_json({**world.to_json(), "coordinator": [1, "10.0.0.1", 32300]})
    assert watched(0, moved) == [4], "node 0 back under node 1: its child 4 beats to it; node 1 coordinates"
    assert watched(1, moved) == []


def test_a_coordinator_never_probes_itself_on_a_suspicion():
    """With the coordinator below a tree parent (not at the root), the parent watches its port and may suspect it."""
    coordinator, coordination, decided, _, _ = routes(coordinating=True)
    put(coordinator, node_body(0))
    put(coordinator, node_body(1))
    coordination.decide(lambda c: c.tick(1.0 + LAST_CALL))
    decided.clear()
    put(coordinator, node_body(1, state="alive", generation=1, to_coordinator=True, suspects={"0": "reset"}))
    assert [a for a in decided if isinstance(a, Probe)] == []


def test_a_suspects_reason_is_one_printable_line():
    assert parse_suspects({"3": "closed\n[trainplane node 0] forged\x1b[31m"}) == {
        3: "closed [trainplane node 0] forged [31m"}
