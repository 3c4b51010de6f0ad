"""The agent's own HTTP routes: ``GET /info``, ``GET``/``PUT /members``, ``POST /world``, ``POST /vote``,
``POST /probe`` (service mode's ``/call`` and ``/exec`` are ``service.dispatch``'s). Handler threads only
validate, decide through the coordinator (``rendezvous.coordinator_lock``) and hand what follows to the
agent's loop; this is where a membership refusal becomes an HTTP status. Standard library only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Optional

from runtime.agent import contract
from runtime.agent.errors import HttpError, MembershipRefused, NotAMember, RendezvousClosed
from runtime.agent.net.server import Request, Response, Routes
from runtime.agent.rendezvous import voting
from runtime.agent.rendezvous.actions import CoordinatorAction
from runtime.agent.rendezvous.coordinator import Coordinator
from runtime.agent.rendezvous.coordinator_lock import Coordination
from runtime.agent.rendezvous.election import Ballot
from runtime.agent.rendezvous.events import Event, WorldArrived
from runtime.agent.rendezvous.heartbeat import TO_COORDINATOR, UPSTREAM, Liveness, parent_answer
from runtime.agent.rendezvous.nodestate import MemberView
from runtime.agent.rendezvous.push import DECIDE_SHARE, DECIDED, RELAY, WITHIN, WorldPusher
from runtime.agent.rendezvous.stragglers import SubtreeRanks
from runtime.agent.rendezvous.suspicions import SUSPECTS
from runtime.agent.rendezvous.suspicions import parse as parse_suspects
from runtime.agent.spec.agent_settings import AgentSettings
from runtime.agent.spec.status import TERMINAL
from runtime.agent.world import Failure, Node, World


def status_of(refusal: MembershipRefused) -> int:
    """The HTTP status a membership refusal is answered with: 400 for a node id outside the job, 410 for a
    closed rendezvous (``RendezvousClosed``), else 409."""
    return 400 if isinstance(refusal, NotAMember) else 410 if isinstance(refusal, RendezvousClosed) else 409


@dataclass(frozen=True)
class Counters:
    """What ``GET /info`` reports besides the world: requests this agent served, worlds it sent, and
    service mode's counters (``None`` in batch mode)."""

    requests_served: Callable[[], int]
    worlds_sent: Callable[[], int]
    service: Callable[[], Optional[dict[str, int]]]


class AgentRoutes:
    """The membership routes of one agent.

    Args:
        settings: the agent's settings.
        view: returns the node's read-only view (``member.MemberView``: its world, its epoch).
        coordination: this node's coordinator role.
        children: what this node hears from its tree children (it forwards their ages upward).
        upstream: seconds since the coordinator last heard this node, at a monotonic time
            (``HeartbeatState.upstream_age``): a tree parent's answer to its children carries it.
        pusher: relays a world pushed for relaying to this node's tree children.
        actions: takes the coordinator's actions (to the agent's loop).
        arrived: takes the events a request brings (a pushed world, a candidate's ballot) to the agent's loop.
        counters: the numbers ``/info`` reports.
        clock: monotonic clock, seconds.
        subtree: where a tree parent keeps its descendants' ranks for its next beat upward.
        suspected: takes the suspects a tree child's beat carries (node id to why, ``suspicions``), on a tree
            parent, to pass up with a beat sent now (the coordinator probes them instead).
    """

    def __init__(self, *, settings: AgentSettings, view: Callable[[], MemberView], coordination: Coordination,
                 children: Liveness, upstream: Callable[[float], float], pusher: WorldPusher,
                 actions: Callable[[list[CoordinatorAction]], None],
                 arrived: Callable[[Event], None], counters: Counters, clock: Callable[[], float],
                 subtree: Optional[SubtreeRanks] = None,
                 suspected: Callable[[dict[int, str]], None] = lambda _suspects: None) -> None:
        self._subtree = subtree or SubtreeRanks()
        self._suspected = suspected
        self._settings = settings
        self._view = view
        self._coordination = coordination
        self._children = children
        self._upstream = upstream
        self._pusher = pusher
        self._actions = actions
        self._arrived = arrived
        self._counters = counters
        self._clock = clock

    def routes(self) -> Routes:
        """The routes, by method and path."""
        return {
            ("GET", contract.ROUTE_INFO): self.info,
            ("GET", contract.ROUTE_MEMBERS): self.members,
            ("PUT", contract.ROUTE_MEMBERS): self.member,
            ("POST", contract.ROUTE_WORLD): self.world,
            ("POST", contract.ROUTE_VOTE): self.vote,
            ("POST", contract.ROUTE_PROBE): self.probe,
        }

    @staticmethod
    def urgent() -> frozenset[tuple[str, str]]:
        """The routes another node waits on to decide membership, ``POST /vote`` and ``POST /probe``: the server
        runs them in a pool of their own (``AgentServer``'s ``urgent``)."""
        return frozenset({("POST", contract.ROUTE_VOTE), ("POST", contract.ROUTE_PROBE)})

    @staticmethod
    def on_loop() -> frozenset[tuple[str, str]]:
        """The routes whose handlers never block (a lock held briefly, a queue put), so the server runs
        them on its loop: every route but ``POST /vote`` and ``POST /probe``, which wait for the agent's verdict."""
        return frozenset({("GET", contract.ROUTE_INFO), ("GET", contract.ROUTE_MEMBERS),
                          ("PUT", contract.ROUTE_MEMBERS), ("POST", contract.ROUTE_WORLD)})

    def _world(self) -> Optional[World]:
        return self._view().world

    def info(self, _request: Request) -> Response:
        """``GET /info``: this node, its world and its counters."""
        view, spec, node = self._view(), self._settings.spec, self._settings.node
        world = view.world
        return Response(200, {"epoch": view.epoch,
            "job": spec.job_name, "node_id": node.node_id,
            "node_rank": world.node_rank_of(node.node_id) if world and world.has(node.node_id) else None,
            "addr": node.advertise_address, "num_proc": spec.num_proc,
            "generation": world.generation if world else 0, "status": world.status if world else "forming",
            "mode": spec.mode, "distribution": spec.distribution, "coordinator": self._coordination.active,
            "requests_served": self._counters.requests_served(), "worlds_sent": self._counters.worlds_sent(),
            "service": self._counters.service(),
            **({"message": world.message, "exit_code": world.exit_code} if world and world.status in TERMINAL else {}),
            "world_coordinator": list(world.coordinator) if world else None,
        })

    def members(self, _request: Request) -> Response:
        """``GET /members``: the coordinator's membership view."""
        snapshot = self._coordination.use(lambda c: c.snapshot(self._clock()))
        if snapshot is None:
            raise HttpError(404, "membership is served by the coordinator (node 0)")
        return Response(200, snapshot)

    def member(self, request: Request) -> Response:
        """``PUT /members``: a node registers, reports its processes, or beats (to its parent or here).

        Raises:
            HttpError: 400 for a bad body, 404 for a registration or report to a node that does not
                coordinate, 400/409 for what the coordinator refuses (:func:`status_of`).
        """
        body = request.body
        try:
            node = Node(int(body["node_id"]), str(body["addr"]), int(body["port"]), int(body["num_proc"]))
            state = str(body.get("state", "joining"))
            generation = int(body.get("generation", 0))
            failure = Failure.from_json(body["failure"]) if body.get("failure") else None
            ages = {int(k): float(v) for k, v in (body.get("ages") or {}).items()}
            epoch = int(body.get("epoch", 1))
            suspects = parse_suspects(body.get(SUSPECTS))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise HttpError(400, f"bad membership body: {exc!r}") from None
        if state == "alive":
            forwarded = body.get("subtree_ranks")
            subtree: dict[Any, Any] = forwarded if isinstance(forwarded, dict) else {}
            return self._beat(node.node_id, generation, ages, {node.node_id: body.get("ranks"), **{
                int(k): v for k, v in subtree.items() if str(k).isdigit()}}, epoch,
                to_coordinator=body.get(TO_COORDINATOR) is True, suspects=suspects)
        if not self._coordination.active:
            raise HttpError(404, "registration goes to the coordinator")
        message = str(body.get("message", ""))
        try:
            actions = self._coordination.decide(
                lambda c: c.register(node, self._clock()) if state == "joining"
                else c.report(node.node_id, generation, state, failure, message, self._clock()))
        except MembershipRefused as exc:
            raise HttpError(status_of(exc), str(exc)) from None
        if actions:
            self._actions(actions)
        world = self._coordination.use(lambda c: c.world)
        return Response(200, {"generation": world.generation if world else 0})

    def _beat(self, node_id: int, generation: int, ages: dict[int, float], ranks: dict[int, Any],
              epoch: int, *, to_coordinator: bool, suspects: dict[int, str]) -> Response:
        """A child's heartbeat: record it (coordinator) or keep it for the next beat upward (parent);
        ``ranks`` (node id to its ranks: the child's own and those its subtree forwarded) are noted
        by the coordinator (their activity, ``stragglers``) or kept by the parent to forward. A beat
        sent ``to_coordinator`` that reaches a node not coordinating (one that stepped down) is
        refused with 404, so its sender counts the coordinator lost after a TTL as if it were silent
        (answering it would hide the loss from the fencing rule's voters). A parent decides the rest by
        ``heartbeat.parent_answer``. The beat's ``suspects`` are probed now (coordinator) or passed up (parent).

        Raises:
            HttpError: 404 for a beat to the coordinator at a node that does not coordinate; 409 (and
                400) for what the coordinator refuses, or a child not in this parent's world."""
        now = self._clock()
        upstream: Optional[float] = None
        if self._coordination.active:
            def beat(c: Coordinator) -> Optional[World]:
                c.heartbeat(node_id, ages, now, epoch)
                for nid, entries in ranks.items():
                    if isinstance(entries, list):
                        c.activity(nid, generation, entries, now)
                return c.world

            try:
                world = self._coordination.use(beat)
            except MembershipRefused as exc:
                raise HttpError(status_of(exc), str(exc)) from None
            if suspects:
                self._probe(node_id, suspects)
        else:
            if to_coordinator:
                raise HttpError(404, f"node {self._settings.node.node_id} does not coordinate; a heartbeat to the "
                                     f"coordinator goes to the node coordinating this node's world")
            world = self._world()
            answer = parent_answer(world, node_id, generation, epoch, self._view().epoch)
            if answer.refused:
                raise HttpError(409, f"node {node_id} is not in this node's world; register again")
            if suspects:  # whatever the beat counts for: the coordinator's probe decides
                self._suspected(suspects)
            if answer.keeps:
                self._children.beat(node_id, now)
                self._children.merge(ages, now)
                for nid, entries in ranks.items():
                    self._subtree.note(nid, entries, now)
            if answer.tells_age:
                upstream = round(self._upstream(now), 3)
        fields: dict[str, Any] = {"generation": world.generation if world else 0}
        if upstream is not None:  # a parent says how long ago the coordinator last heard it
            fields[UPSTREAM] = upstream
        if world is not None and world.generation > generation:
            head = json.dumps(fields)[:-1].encode()
            return Response(200, {**fields, "world": world.to_json()}, b'%b, "world": %b}' % (head, world.encoded()))
        return Response(200, fields)

    def _probe(self, node_id: int, suspects: dict[int, str]) -> None:
        """The suspects of node ``node_id``'s beat, probed now; passed up with this node's next beat instead when it
        gave up the role since it recorded the beat."""
        probes = self._coordination.attempt(lambda c: [p for nid, why in suspects.items() for p in c.suspect(
            nid, f"{why} (seen by node {node_id}, its tree parent or above)")])
        if probes is None:
            self._suspected(suspects)
        elif probes:
            self._actions(probes)

    def world(self, request: Request) -> Response:
        """``POST /world``: a new world; with ``"relay": true``, also sent on to this node's subtree."""
        try:
            world = World.from_json(request.body)
        except (KeyError, TypeError, ValueError) as exc:
            raise HttpError(400, f"bad world: {exc!r}") from None
        if world.job != self._settings.spec.job_name:
            raise HttpError(409, f"world of job {world.job!r} sent to job {self._settings.spec.job_name!r}")
        mine = self._world()
        if mine is not None and mine.epoch > world.epoch:
            raise HttpError(409, f"fenced: this node runs epoch {mine.epoch} (generation {mine.generation}); the "
                                 f"world pushed is of epoch {world.epoch}")
        self._arrived(WorldArrived(world))
        if request.body.get(RELAY) is True:
            self._pusher.relay(world)
        return Response(200, {"accepted": world.generation})

    def vote(self, request: Request) -> Response:
        """``POST /vote``: a candidate asks for this node's vote (``election``); ``Member`` decides.

        Raises:
            HttpError: 400 for a bad ballot, 503 when this node did not decide in time.
        """
        try:
            ballot = Ballot.from_json(request.body)
        except (KeyError, TypeError, ValueError) as exc:
            raise HttpError(400, f"bad ballot: {exc!r}") from None
        verdict = voting.answer(ballot, self._arrived)
        if verdict is None:
            raise HttpError(503, "this node did not decide on the vote in time")
        return Response(200, voting.verdict_json(verdict))

    def probe(self, request: Request) -> Response:
        """``POST /probe``: coordinator node ``prober`` of ``epoch`` asks whether this node still counts it
        (``push.Prober``). ``Member`` decides (``election.Election.confirm``), in order with the ballots this node
        answers, within :data:`~runtime.agent.rendezvous.push.DECIDE_SHARE` of the probe's ``within`` seconds (at most
        a TTL): the answer has the epoch this node knows, its world's coordinator and whether it was decided (an
        answer not decided in time counts for nothing at the coordinator).

        Raises:
            HttpError: 400 for a bad probe.
        """
        try:
            prober, epoch, within = int(request.body["prober"]), int(request.body["epoch"]), float(request.body[WITHIN])
        except (KeyError, TypeError, ValueError) as exc:
            raise HttpError(400, f"bad probe: {exc!r}") from None
        if not 0 <= within < float("inf"):
            raise HttpError(400, f"bad probe: within {within!r} s")
        wait = min(within, self._settings.spec.heartbeat_ttl) * DECIDE_SHARE
        verdict = voting.confirm(prober, epoch, self._arrived, wait)
        view = self._view()
        return Response(200, {"epoch": view.epoch if verdict is None else verdict.epoch, DECIDED: verdict is not None,
                              "world_coordinator": list(view.world.coordinator) if view.world else None})
