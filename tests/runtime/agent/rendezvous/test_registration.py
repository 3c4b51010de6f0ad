"""Registration and the heartbeat thread over the in-memory transport: what each answer ends in."""

from __future__ import annotations

import json
import queue
import threading
from itertools import count
from typing import Any, Callable

import pytest

from runtime.agent import contract
from runtime.agent.errors import HttpError
from runtime.agent.net.resolver import Resolver
from runtime.agent.net.server import Request, Response
from runtime.agent.rendezvous.events import CoordinatorFound, Event, Fatal, Registered, Removed, WorldArrived
from runtime.agent.rendezvous.heartbeat import HeartbeatState, HeartbeatTiming, Liveness
from runtime.agent.rendezvous.heartbeat_thread import Heartbeats
from runtime.agent.rendezvous.member import MemberView
from runtime.agent.rendezvous.registration import Registration
from runtime.agent.world import Node, World
from testbed.transport import FakeNetwork, FakeTransport
from tests.conftest import wait_until

pytestmark = pytest.mark.unit

TOKEN = "registration-token"
COORDINATOR = ("10.0.0.0", 32300)
BODY = {"node_id": 1, "addr": "10.0.0.1", "port": 32300, "num_proc": 1, "state": "joining"}


def coordinator(network: FakeNetwork, answer) -> list[dict]:
    """Serve ``PUT /members`` at the coordinator's address with ``answer(body)``; the bodies it got."""
    received: list[dict] = []

    def members(request: Request) -> Response:
        received.append(dict(request.body))
        return answer(request.body)

    network.serve(*COORDINATOR, TOKEN, {("PUT", contract.ROUTE_MEMBERS): members})
    return received


def registration(network: FakeNetwork, token: str = TOKEN, clock=lambda: 0.0) -> tuple[Registration, list[Event]]:
    """A registration and the events it sends the agent's loop."""
    sent: list[Event] = []
    resolver = Resolver({"coordinator": COORDINATOR[0]})
    return Registration(host="coordinator", body=BODY, quorum_timeout=10.0, transport=FakeTransport(network, token),
                        resolver=resolver, address=lambda: ("", COORDINATOR[1]), events=sent.append,
                        stopping=threading.Event(), clock=clock), sent


def test_a_registration_the_coordinator_takes_sets_registered():
    network = FakeNetwork()
    received = coordinator(network, lambda _body: Response(200, {"generation": 0}))
    reg, sent = registration(network)
    reg.register(0.0)
    assert sent == [CoordinatorFound(COORDINATOR), Registered()] and received == [BODY]


def test_a_coordinator_not_up_yet_is_asked_again_until_it_answers():
    network = FakeNetwork()
    reg, sent = registration(network)
    thread = threading.Thread(target=reg.register, args=(0.0,))
    thread.start()
    coordinator(network, lambda _body: Response(200, {"generation": 0}))
    thread.join(timeout=10)
    assert sent == [CoordinatorFound(COORDINATOR), Registered()]


@pytest.mark.parametrize(("token", "status", "message"), [
    (TOKEN, 409, "registration refused: PUT http://10.0.0.0:32300/members: 409 the world formed without node 1"),
    ("wrong", 200, "the coordinator refused this node's token"),
])
def test_a_refusal_ends_the_node_at_once(token: str, status: int, message: str):
    network = FakeNetwork()

    def answer(_body: object) -> Response:
        raise HttpError(status, "the world formed without node 1")

    coordinator(network, answer)
    reg, sent = registration(network, token=token)
    reg.register(0.0)
    _found, ended = sent
    assert isinstance(ended, Fatal) and message in ended.message and ended.exit_code == contract.EXIT_RENDEZVOUS


def test_a_closed_rendezvous_ends_the_node_with_success_saying_why():
    """410 (``RendezvousClosed``, the job's ranks have begun to finish): the node is not needed; it exits 0."""
    network = FakeNetwork()

    def answer(_body: object) -> Response:
        raise HttpError(410, "the job is finishing: rank 0 of generation 2 exited 0; node 1 is not admitted")

    coordinator(network, answer)
    reg, sent = registration(network)
    reg.register(0.0)
    _found, ended = sent
    assert isinstance(ended, Fatal) and ended.exit_code == contract.EXIT_OK
    assert ended.message.startswith("not admitted, nothing to do: ")
    assert "rank 0 of generation 2 exited 0" in ended.message


def test_a_coordinator_unreachable_for_the_quorum_timeout_ends_the_node():
    """The fake clock moves 4 s at each look; nobody serves the coordinator's address."""
    ticks = count(0, 4)
    reg, sent = registration(FakeNetwork(), clock=lambda: float(next(ticks)))
    reg.register(0.0)
    _found, ended = sent
    assert isinstance(ended, Fatal) and ended.message.startswith("coordinator 10.0.0.0:32300 unreachable for 10 s: ")


def three_nodes(coordinator: tuple[int, str, int] = (0, *COORDINATOR)) -> World:
    """Generation 1 of nodes 0, 1 and 2, coordinated by ``coordinator``."""
    return World(job="j", generation=1, restart_count=0, max_restarts=0, master_port=29500, coordinator=coordinator,
                 nodes=(Node(0, *COORDINATOR, 1), Node(1, "10.0.0.1", 32300, 1), Node(2, "10.0.0.2", 32300, 1)))


def heartbeats(network: FakeNetwork, state: HeartbeatState, view: Callable[[], MemberView], stopping: threading.Event,
               wake: threading.Event, **extra: Any) -> Heartbeats:
    """Node 1's heartbeats to the fake network's coordinator (``extra``: children, deliver, handover)."""
    settings: dict[str, Any] = {"children": Liveness(), "deliver": lambda _e: None, **extra}
    return Heartbeats(state=state, member={k: v for k, v in BODY.items() if k != "state"},
                      transport=FakeTransport(network, TOKEN), view=view, say=lambda _line: None, clock=lambda: 0.0,
                      stopping=stopping, wake=wake, **settings)


def beating(network: FakeNetwork, world: World) -> tuple[queue.SimpleQueue[Event], Liveness, threading.Event]:
    events: queue.SimpleQueue[Event] = queue.SimpleQueue()
    children, stopping, wake = Liveness(), threading.Event(), threading.Event()
    state = HeartbeatState(HeartbeatTiming(interval=0.01, ttl=0.04), 1, width=50, threshold=100, now=0.0,
                           jitter=lambda: 0.0)
    view = MemberView(world, COORDINATOR, registered=True, coordinating=False)
    heartbeats(network, state, lambda: view, stopping, wake, children=children, deliver=events.put).start()
    return events, children, stopping


def test_beats_carry_the_subtrees_ages_and_bring_back_a_newer_world():
    world = three_nodes()
    newer = World.from_json({**world.to_json(), "generation": 2})
    network = FakeNetwork()
    received = coordinator(network, lambda _body: Response(200, {"generation": 2, "world": newer.to_json()}))
    events, children, stopping = beating(network, world)
    children.beat(2, 0.0)
    try:
        event = events.get(timeout=10)
    finally:
        stopping.set()
    assert event == WorldArrived(newer)
    beat = json.loads(json.dumps(received[0]))
    assert (beat["state"], beat["generation"], beat["node_id"]) == ("alive", 1, 1)
    assert set(beat["ages"]) <= {"2"}


def test_a_beat_the_coordinator_refuses_tells_the_node_it_was_removed():
    world = World(job="j", generation=1, restart_count=0, max_restarts=0, master_port=29500,
                  nodes=(Node(0, *COORDINATOR, 1), Node(1, "10.0.0.1", 32300, 1)), coordinator=(0, *COORDINATOR))
    network = FakeNetwork()

    def refuse(_body: object) -> Response:
        raise HttpError(409, "node 1 is not in the current world; register again")

    coordinator(network, refuse)
    events, _children, stopping = beating(network, world)
    try:
        event = events.get(timeout=10)
    finally:
        stopping.set()
    assert isinstance(event, Removed) and "register again" in event.reason


def test_a_suspect_goes_up_with_the_next_beat_and_again_after_a_failed_one():
    """A tree child's agent port said its agent is gone: the node beats at once with ``suspects``; a beat that
    fails (the coordinator answered 503) keeps them for the next one, and one answered carries them no more."""
    world = three_nodes()
    network = FakeNetwork()
    answers = iter([HttpError(503, "busy")])

    def answer(_body: object) -> Response:
        failure = next(answers, None)
        if failure is not None:
            raise failure
        return Response(200, {"generation": 1})

    received = coordinator(network, answer)
    stopping, wake = threading.Event(), threading.Event()
    state = HeartbeatState(HeartbeatTiming(interval=0.01, ttl=0.04), 1, width=50, threshold=100, now=0.0,
                           jitter=lambda: 0.0)
    view = MemberView(world, COORDINATOR, registered=True, coordinating=False)
    beats = heartbeats(network, state, lambda: view, stopping, wake)
    beats.suspected({2: "its agent port refused a connection"})
    beats.start()
    try:
        assert wait_until(lambda: len(received) >= 3, timeout=10)
    finally:
        stopping.set()
        wake.set()
    carried = [json.loads(json.dumps(body)).get("suspects") for body in received[:3]]
    assert carried == [{"2": "its agent port refused a connection"}] * 2 + [None]


def test_suspects_held_once_the_node_coordinates_are_handed_to_its_coordinator_not_beaten():
    """A node that took over (or a suspect noted as it did, or carried back by a beat that failed as the old
    coordinator died) probes them itself: they are handed over, never left in a heartbeat thread that beats no more."""
    world = three_nodes(coordinator=(1, "10.0.0.1", 32300))
    network = FakeNetwork()
    received = coordinator(network, lambda _body: Response(200, {"generation": 1}))
    stopping, wake = threading.Event(), threading.Event()
    handed: queue.SimpleQueue[dict[int, str]] = queue.SimpleQueue()
    state = HeartbeatState(HeartbeatTiming(interval=0.01, ttl=0.04), 1, width=50, threshold=100, now=0.0,
                           jitter=lambda: 0.0)
    view = MemberView(world, ("10.0.0.1", 32300), registered=True, coordinating=True)
    beats = heartbeats(network, state, lambda: view, stopping, wake, handover=lambda held: handed.put(held) or True)
    beats.start()
    try:
        beats.suspected({2: "its agent port refused a connection"})
        assert handed.get(timeout=10) == {2: "its agent port refused a connection"}
    finally:
        stopping.set()
        wake.set()
    assert received == [] and handed.empty()


def test_suspects_the_coordinator_cannot_take_as_it_gives_the_role_up_go_up_with_the_next_beat():
    """The node's view still says it coordinates while the role is being given up: the handover refuses, and the
    suspects wait for the next beat, which goes up to the new coordinator (no wake-up of its own: no busy loop)."""
    world = three_nodes()
    network = FakeNetwork()
    received = coordinator(network, lambda _body: Response(200, {"generation": 1}))
    stopping, wake = threading.Event(), threading.Event()
    offered: queue.SimpleQueue[dict[int, str]] = queue.SimpleQueue()
    state = HeartbeatState(HeartbeatTiming(interval=0.5, ttl=2.0), 1, width=50, threshold=100, now=0.0,
                           jitter=lambda: 0.0)
    views = [MemberView(world, COORDINATOR, registered=True, coordinating=True)]

    def refuse(held: dict[int, str]) -> bool:
        offered.put(held)
        return False

    beats = heartbeats(network, state, lambda: views[-1], stopping, wake, handover=refuse)
    beats.start()
    try:
        beats.suspected({2: "reset"})
        assert offered.get(timeout=10) == {2: "reset"}
        views.append(MemberView(world, COORDINATOR, registered=True, coordinating=False))
        wake.set()
        assert wait_until(lambda: received, timeout=10)
        assert offered.empty(), "offered once: the refusal did not wake the thread again"
    finally:
        stopping.set()
        wake.set()
    assert json.loads(json.dumps(received[0])).get("suspects") == {"2": "reset"}
