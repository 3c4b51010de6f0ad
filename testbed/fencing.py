"""A whole job's membership on a fake clock, without sockets: every node's real ``Member``,
``HeartbeatState`` and (where it holds the role) ``Coordinator``, joined by a pretend network that
tests cut (partitions) and whose agents they stop (``SIGSTOP``: a stopped node takes no step, and
sees the clock jump when it resumes). The agent's I/O is replaced by direct calls: a beat, a push,
a probe, a ballot or a report reaches its node at once, or not at all when either end is cut off or
stopped. For tests of the fencing rule (``rendezvous.election``, ``rendezvous.lease``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from runtime.agent.errors import MembershipRefused
from runtime.agent.execution.procs import ProcExit
from runtime.agent.rendezvous import actions as act
from runtime.agent.rendezvous.coordinator import Coordinator
from runtime.agent.rendezvous.election import Verdict
from runtime.agent.rendezvous.events import (
    Deposed,
    Event,
    Probed,
    ProcessExited,
    Registered,
    Tick,
    VoteRequested,
    VotesCounted,
    WorldArrived,
)
from runtime.agent.rendezvous.heartbeat import (
    Beat,
    BeatEffects,
    HeartbeatState,
    HeartbeatTiming,
    Liveness,
    parent_answer,
)
from runtime.agent.rendezvous.member import Member
from runtime.agent.world import Failure, Node, World
from testbed.settings import agent_settings

STEP = 0.05
"""Seconds of fake time per step."""


@dataclass
class SimNode:
    """One node: its decisions, and what its ranks run (the world's ``order``, or ``None``)."""

    node: Node
    member: Member
    beats: HeartbeatState
    coordinator: Optional[Coordinator] = None
    ranks: Optional[tuple[int, int]] = None
    exit_code: Optional[int] = None
    said: list[str] = field(default_factory=list)
    register_at: Optional[float] = None
    children: Liveness = field(default_factory=Liveness)


class SimJob:
    """An elastic job of ``nodes`` nodes (``min_workers``), TTL ``ttl`` seconds, formed at once. A world
    of ``threshold`` nodes or more beats along a tree of ``width`` children per node, as the agents'
    worlds do: a child beats its parent, which forwards its subtree's ages up and answers with how long
    ago the coordinator last heard it (``HeartbeatState.upstream_age``).

    Attributes:
        now: the fake monotonic time, seconds.
        cut: node ids cut off from every other node.
        stopped: node ids whose agent is stopped.
        beats_lost: node ids whose heartbeats to the coordinator are lost on the way (a half-broken link, an
            overloaded coordinator), while everything else between them gets through (probes, pushes, ballots).
    """

    def __init__(self, nodes: int = 3, *, min_workers: int = 2, ttl: float = 3.0, elastic: bool = True,
                 max_restarts: int = 0, width: int = 50, threshold: int = 100) -> None:
        self.now = 0.0
        self.cut: set[int] = set()
        self.stopped: set[int] = set()
        self.beats_lost: set[int] = set()
        bounds = {"min_workers": min_workers, "max_workers": nodes} if elastic else {}
        self.settings = [agent_settings(job_name="j", node_id=i, workers=nodes, heartbeat_ttl=ttl,
                                        heartbeat_interval=ttl / 12, advertise_address=f"10.0.0.{i}",
                                        max_restarts=max_restarts, tree_fanout=width, tree_threshold=threshold,
                                        **bounds)
                         for i in range(nodes)]
        timing = HeartbeatTiming(ttl / 12, ttl)
        self.nodes = [SimNode(Node(i, f"10.0.0.{i}", 32300, 1), Member(
            node_id=i, local_world_size=1, elastic=elastic, signals_to_handle="SIGTERM", ttl=ttl, quorum_timeout=60.0,
            coordinating=i == 0, coordinator_port=32300), HeartbeatState(timing, i, width=width, threshold=threshold,
                                                                         now=0.0, jitter=lambda: 0.0))
                      for i in range(nodes)]
        self.nodes[0].coordinator = Coordinator(self.settings[0], 0.0)
        for n in self.nodes:
            self._member(n, n.member.start(0.0))
        self.run(1.0)

    # --- the test's controls ---------------------------------------------------------------------

    def run(self, seconds: float) -> None:
        """Let ``seconds`` of fake time pass, every node not stopped taking its steps."""
        end = self.now + seconds
        while self.now < end:
            self.now = round(self.now + STEP, 6)
            for n in self.nodes:
                if n.node.node_id not in self.stopped and n.exit_code is None:
                    self._step(n)

    def exit_ranks(self, node_id: int, code: int) -> None:
        """Node ``node_id``'s rank exits with ``code`` (e.g. its collective failed)."""
        n = self.nodes[node_id]
        world = n.member.world
        started = n.member.running_generation
        if world is not None and n.ranks is not None and started is not None:
            self._event(n, ProcessExited(ProcExit(started, 0, world.first_rank(world.node_rank_of(node_id)), code, (),
                                                  0.0, False)))

    def coordinators(self) -> list[int]:
        """Node ids of running (not stopped) agents holding a coordinator role not fenced out."""
        return [n.node.node_id for n in self.nodes if n.coordinator is not None and n.coordinator.lease.deposed is None
                and n.exit_code is None and n.node.node_id not in self.stopped]

    def running_worlds(self) -> set[tuple[int, int]]:
        """The worlds (``order``) the ranks of running (not stopped) agents are in."""
        return {n.ranks for n in self.nodes
                if n.ranks is not None and n.exit_code is None and n.node.node_id not in self.stopped}

    # --- one node's step -------------------------------------------------------------------------

    def _reach(self, a: int, b: int) -> bool:
        return a == b or (a not in self.cut and b not in self.cut and b not in self.stopped)

    def _step(self, n: SimNode) -> None:
        if n.register_at is not None and self.now >= n.register_at:
            self._register(n)
        self._event(n, Tick())
        if n.coordinator is not None:
            self._coord(n, n.coordinator.tick(self.now))
        view = n.member.view
        beat = n.beats.next(view.world, view.registered, view.coordinating, self.now)
        if beat is None or view.world is None:
            return
        world = view.world
        outcome = self._beat_parent(n, beat, world, beat.parent) if beat.parent is not None \
            else self._beat_coordinator(n, beat, world)
        for event in outcome.events:
            self._event(n, event)

    def _beat_coordinator(self, n: SimNode, beat: Beat, world: World) -> BeatEffects:
        """``n``'s beat to its world's coordinator, with its subtree's ages (``routes.AgentRoutes._beat``)."""
        me = n.node.node_id
        target = world.coordinator[0]
        holder = self.nodes[target].coordinator
        if not self._reach(me, target) or holder is None or me in self.beats_lost:  # lost, or 404 (not coordinating)
            return n.beats.failed(beat, world, f"node {target}", "no answer", self.now)
        ages = {k: v for k, v in n.children.ages(self.now).items() if world.has(k)} if beat.ages else {}
        try:
            holder.heartbeat(me, ages, self.now, n.member.view.epoch)
        except MembershipRefused as exc:
            return n.beats.refused(beat, str(exc))
        newer = holder.world if holder.world is not None and holder.world.order > world.order else None
        return n.beats.answered(beat, newer, self.now)

    def _beat_parent(self, n: SimNode, beat: Beat, world: World, up: Node) -> BeatEffects:
        """``n``'s beat to its tree parent, which keeps it for its own next beat upward
        (``routes.AgentRoutes._beat``)."""
        me, parent = n.node.node_id, self.nodes[up.node_id]
        if not self._reach(me, parent.node.node_id) or parent.exit_code is not None:
            return n.beats.failed(beat, world, f"node {parent.node.node_id}", "no answer", self.now)
        mine = parent.member.view.world
        answer = parent_answer(mine, me, world.generation, n.member.view.epoch, parent.member.view.epoch)
        if answer.refused:
            return n.beats.refused(beat, f"node {me} is not in this node's world; register again")
        if answer.keeps:
            parent.children.beat(me, self.now)
            parent.children.merge(n.children.ages(self.now), self.now)
        newer = mine if mine is not None and mine.order > world.order else None
        upstream = parent.beats.upstream_age(self.now) if answer.tells_age else None
        return n.beats.answered(beat, newer, self.now, upstream=upstream)

    def _event(self, n: SimNode, event: Event) -> None:
        self._member(n, n.member.handle(event, self.now))

    def _member(self, n: SimNode, actions: tuple[act.MemberAction, ...]) -> None:
        for a in actions:
            if isinstance(a, act.Exit):
                n.exit_code, n.ranks = a.code, None
            elif isinstance(a, act.Say):
                n.said.append(a.message)
            elif isinstance(a, act.StopProcesses):
                n.ranks = None
            elif isinstance(a, (act.StartGeneration, act.DeliverChange)):
                n.ranks = a.world.order
            elif isinstance(a, act.Register):
                n.register_at = self.now + a.delay
            elif isinstance(a, act.AskVotes):
                self._ask(n, a)
            elif isinstance(a, act.AnswerVote):
                a.reply(a.verdict)
            elif isinstance(a, act.TakeOver):
                n.coordinator = Coordinator(self.settings[n.node.node_id], self.now, world=a.world, epoch=a.epoch,
                                            elapsed=a.elapsed)
                self._coord(n, n.coordinator.lose(a.lost, f"coordinator node {a.lost} lost"))
            elif isinstance(a, act.Report):
                self._report(n, a)
            elif isinstance(a, act.Resign):
                n.coordinator = None

    def _register(self, n: SimNode) -> None:
        me, target = n.node.node_id, self._coordinator_of(n)
        holder = self.nodes[target].coordinator if target is not None else None
        if target is None or holder is None or not self._reach(me, target):
            n.register_at = self.now + 0.5
            return
        n.register_at = None
        try:
            actions = holder.register(n.node, self.now)
        except MembershipRefused as exc:
            n.said.append(f"registration refused: {exc}")
            return
        self._event(n, Registered())
        self._coord(self.nodes[target], actions)

    def _coordinator_of(self, n: SimNode) -> Optional[int]:
        """Where ``n`` registers: itself when it coordinates, its view's coordinator, else the running
        world's as a reachable peer knows it (discovery), else node 0 (the configured host)."""
        if n.coordinator is not None:
            return n.node.node_id
        address = n.member.view.coordinator[0]
        if address:
            return int(address.rsplit(".", 1)[1])
        for peer in self.nodes:
            world = peer.member.world
            if peer is not n and self._reach(n.node.node_id, peer.node.node_id) and world is not None:
                return world.coordinator[0]
        return 0

    def _ask(self, n: SimNode, ask: act.AskVotes) -> None:
        granted, seen, newer = [n.node.node_id], 0, None
        for peer in ask.peers:
            p = self.nodes[peer.node_id]
            if not self._reach(n.node.node_id, peer.node_id) or p.exit_code is not None:
                continue
            verdicts: list[Verdict] = []
            self._event(p, VoteRequested(ask.ballot, verdicts.append))
            [verdict] = verdicts
            seen = max(seen, verdict.epoch)
            if verdict.granted:
                granted.append(peer.node_id)
            if verdict.world is not None and (newer is None or verdict.world.order > newer.order):
                newer = verdict.world
        self._event(n, VotesCounted(ask.ballot, tuple(granted), seen, newer))

    def _report(self, n: SimNode, report: act.Report) -> None:
        world = n.member.world
        target = world.coordinator[0] if world is not None else None
        holder = self.nodes[target].coordinator if target is not None else None
        if target is not None and holder is not None and self._reach(n.node.node_id, target):
            failure = None
            if report.exit is not None:
                ended = report.exit
                failure = Failure(ended.rank, n.node.node_id, ended.local_rank, ended.exit_code, addr=n.node.addr)
            self._coord(self.nodes[target], holder.report(n.node.node_id, report.generation, report.state, failure,
                                                          report.message, now=self.now))

    def _coord(self, n: SimNode, actions: list[act.CoordinatorAction]) -> None:
        for a in actions:
            if isinstance(a, act.Say):
                n.said.append(a.message)
            elif isinstance(a, act.Push):
                self._push(n, a.world, a.targets)
            elif isinstance(a, act.Probe):
                self._probe(n, a)
            elif isinstance(a, act.StepDown):
                n.coordinator = None
                self._event(n, Deposed(a.reason, a.address if a.address[0] else ("", 32300)))
                return

    def _push(self, n: SimNode, world: World, targets: tuple[Node, ...]) -> None:
        for target in targets:
            t = self.nodes[target.node_id]
            if not self._reach(n.node.node_id, target.node_id) or t.exit_code is not None:
                continue
            mine = t.member.world
            if mine is not None and mine.epoch > world.epoch:
                if n.coordinator is not None:  # refused as fenced: the coordinator probes it
                    self._coord(n, n.coordinator.suspect(target.node_id, "refused a world push"))
                continue
            self._event(t, WorldArrived(world))

    def _probe(self, n: SimNode, probe: act.Probe) -> None:
        """``n``'s probe of a node, answered as ``routes.AgentRoutes.probe`` answers it: its ``Member`` decides."""
        target = probe.node.node_id
        coordinator = n.coordinator
        if coordinator is None:
            return
        if self._reach(n.node.node_id, target) and self.nodes[target].exit_code is None:
            t = self.nodes[target]
            verdicts: list[Verdict] = []
            self._event(t, Probed(probe.prober, probe.epoch, verdicts.append))
            [verdict] = verdicts
            world = t.member.view.world
            address = (world.coordinator[1], world.coordinator[2]) if world is not None else ("", 0)
            self._coord(n, coordinator.probed(probe, True, probe.reason, self.now, verdict.epoch, address))
        else:  # an exited agent's port refuses at once; a cut or stopped one's probe times out
            gone = self.nodes[target].exit_code is not None and target not in self.cut
            self._coord(n, coordinator.probed(probe, False, f"{probe.reason}: {'refused' if gone else 'no answer'}",
                                              self.now, timed_out=not gone))

