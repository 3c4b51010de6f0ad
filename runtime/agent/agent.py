"""The agent: one per node (pod), a thin executor of what ``Member`` and ``Coordinator`` decide.

All state changes happen on the main thread, which consumes one queue: events for this node's
``rendezvous.member.Member`` (worlds, process exits, signals, heartbeat outcomes, what registration and discovery
found: ``CoordinatorFound``, ``Registered``) and the actions of its coordinator, if it holds the role (decided under
``rendezvous.coordinator_lock``'s lock in HTTP handler, probe and push threads). The agent performs the actions: its
processes (``execution.generation``), registration, heartbeats, world pushes, probes and the watch on agent ports of
the nodes that beat to it (``rendezvous.watch``), and reports, which go to the coordinator over the peer transport
or, on the coordinator itself, to ``Coordinator`` directly. ``Member`` is the one writer of the node's state; helper
threads (registration, heartbeats, reports, routes) read its immutable ``MemberView`` and only send and enqueue, so a
heartbeat failure can never touch training. While its ranks are slow to stop (a thread stops them), the main thread
performs its coordinator's decisions (``NodeProcesses.stop``'s ``meanwhile``), then starts the next generation unless
a world that arrived meanwhile replaces it (``superseded``); the node's own events wait. Standard library only.
"""

from __future__ import annotations

import queue
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, TextIO, Union

from runtime.agent import contract
from runtime.agent.errors import TransportError
from runtime.agent.execution import console, verdict
from runtime.agent.execution.delivery import DELIVERY_SIGNAL
from runtime.agent.execution.generation import NodeProcesses
from runtime.agent.execution.lifeline import die_with_parent, parent_pid
from runtime.agent.execution.procs import LocalProcesses, Spawner
from runtime.agent.net.peer import Exchange, PeerTransport, ServerFactory
from runtime.agent.net.resolver import Resolver
from runtime.agent.net.server import AgentServer
from runtime.agent.net.transport import HttpTransport, encode
from runtime.agent.rendezvous import actions as act
from runtime.agent.rendezvous import voting
from runtime.agent.rendezvous.coordinator import Coordinator
from runtime.agent.rendezvous.coordinator_lock import Coordination
from runtime.agent.rendezvous.discovery import peer_addresses, running_coordinator
from runtime.agent.rendezvous.events import (
    CoordinatorFound,
    DaemonExited,
    Deposed,
    Event,
    Inbox,
    ProcessExited,
    SignalReceived,
    Tick,
    WorldArrived,
)
from runtime.agent.rendezvous.heartbeat import HeartbeatState, HeartbeatTiming, Liveness
from runtime.agent.rendezvous.heartbeat_thread import Heartbeats
from runtime.agent.rendezvous.member import Member
from runtime.agent.rendezvous.push import Prober, WorldPusher
from runtime.agent.rendezvous.registration import Registration
from runtime.agent.rendezvous.stragglers import SubtreeRanks
from runtime.agent.rendezvous.superseded import superseded
from runtime.agent.routes import AgentRoutes, Counters
from runtime.agent.service.linger import linger
from runtime.agent.service.modes import LONG_RUNNING, batch_mode_routes, service_node
from runtime.agent.spec.agent_settings import AgentSettings
from runtime.agent.spec.signals import handled
from runtime.agent.spec.status import FAILED, STOPPED
from runtime.agent.world import Node, World

TICK = 0.1
"""Seconds between the coordinator's time-driven checks (liveness, quorum)."""
WORKER_TICK = 1.0
"""Seconds between a worker's time-driven checks (only the wait for a first world); events wake it at once."""


@dataclass(frozen=True)
class _Decided:
    """Actions the coordinator decided in another thread, for the loop to perform."""

    actions: tuple[act.CoordinatorAction, ...]


class Agent:
    """One node's agent.

    Args:
        settings: validated settings.
        resolver: the name-resolution seam (defaults to DNS with ``settings.plumbing.resolve`` overrides).
        log: text stream for the agent's own messages.
        clock: monotonic clock, seconds.
        spawner: the process-spawner seam; builds the supervisor of one generation's processes
            (default :class:`LocalProcesses`; benchmarks pass one that runs nothing).
        transport: the peer-transport seam, for every part of the agent: membership, and service
            mode's calls and code sync (default: HTTP, service mode on connections of its own), and
            the coordinator's watch on agent ports (``PeerTransport.watch``).
        server: the serving seam: builds the server of the routes from ``AgentServer``'s arguments.
        wait: waits on an event for at most that many seconds of ``clock``; whether it was set: the
            loop's, heartbeat and registration threads' waits (a fake clock drives them in tests).
    """

    def __init__(self, settings: AgentSettings, *, resolver: Optional[Resolver] = None, log: TextIO = sys.stderr,
                 clock: Callable[[], float] = time.monotonic, spawner: Spawner = LocalProcesses,
                 transport: Optional[PeerTransport] = None, server: ServerFactory = AgentServer,
                 wait: Callable[[threading.Event, float], bool] = threading.Event.wait) -> None:
        spec, node = settings.spec, settings.node
        self.settings = settings
        self._log = log
        self._console_writer = console.default().writer()
        self._clock, self._wait = clock, wait
        self._events: Inbox[Union[Event, _Decided]] = Inbox(wait)
        self._stopping, self._wake = threading.Event(), threading.Event()
        self._transport: PeerTransport = transport or HttpTransport(settings.token, clock, job=settings.job)
        self._timing = timing = HeartbeatTiming(spec.heartbeat_interval, spec.heartbeat_ttl)
        self.node = Node(node.node_id, node.advertise_address, node.agent_port, settings.local_world_size)
        self.member = Member(node_id=node.node_id, local_world_size=settings.local_world_size, elastic=spec.elastic,
                             signals_to_handle=spec.signals_to_handle, ttl=timing.ttl,
                             quorum_timeout=spec.quorum_timeout, coordinating=node.is_coordinator,
                             coordinator_port=node.coordinator_port)
        self._coordination = Coordination(Coordinator(settings, clock()) if node.is_coordinator else None)
        self._children, self._subtree = Liveness(), SubtreeRanks()
        self._service = service_node(
            settings, world=lambda: self.member.view.world, say=self.say, clock=clock, transport=transport,
            on_unreachable=lambda n: self._suspect({n.node_id: f"node {n.node_id} ({n.addr}) refused a call"}),
        ) if spec.mode == "service" else None
        self._processes = NodeProcesses(
            settings=settings, spawner=spawner, say=self.say, on_exit=lambda e: self._events.put(ProcessExited(e)),
            on_daemon_exit=lambda name, e: self._events.put(DaemonExited(name, e)), service=self._service)
        self._pusher = WorldPusher(
            node_id=node.node_id, transport=self._transport, width=spec.tree_fanout, threshold=spec.tree_threshold,
            ttl=timing.ttl, clock=clock, say=self.say, delivered=self._delivered,
            refused=lambda n: self._suspect({n.node_id: f"node {n.node_id} ({n.addr}) refused a world push"}))
        self._watch = self._transport.watch(
            lambda n, why: self._suspect({n.node_id: f"node {n.node_id} ({n.addr}): {why}"}), retry_after=timing.cap)
        self._prober = Prober(self._transport, timing.probe_timeout, lambda probe, alive, why, epoch, addr, timeout: (
            self._decide(lambda c: c.probed(probe, alive, why, self._clock(), epoch, addr, timeout))), wait=wait)
        self._resolver = resolver or Resolver(settings.plumbing.resolve)
        self._registration = Registration(
            host=node.coordinator, body={**self._member_body(), "state": "joining"},
            quorum_timeout=spec.quorum_timeout, transport=self._transport, resolver=self._resolver,
            address=lambda: self.member.view.coordinator, events=self._events.put, stopping=self._stopping,
            clock=clock, discover=self._discover, wait=wait)
        beats = HeartbeatState(timing, node.node_id, width=spec.tree_fanout, threshold=spec.tree_threshold,
                               now=clock())
        self._heartbeats = Heartbeats(
            state=beats, member=self._member_body(), transport=self._transport, view=lambda: self.member.view,
            children=self._children, deliver=self._events.put, say=self.say, clock=clock, stopping=self._stopping,
            wake=self._wake, activity=self._processes.activity, subtree=self._subtree, wait=wait,
            handover=self._probe_now)
        routes = AgentRoutes(
            settings=settings, view=lambda: self.member.view, coordination=self._coordination,
            children=self._children, upstream=beats.upstream_age, pusher=self._pusher,
            actions=lambda decided: self._events.put(_Decided(tuple(decided))), arrived=self._events.put,
            counters=Counters(lambda: self._server.requests_served, lambda: self._pusher.sent,
                              lambda: self._service.stats() if self._service is not None else None), clock=clock,
            subtree=self._subtree, suspected=self._heartbeats.suspected)
        self._server = server((node.bind_address, node.agent_port), settings.token, {
            **routes.routes(), **(self._service.routes() if self._service is not None else batch_mode_routes())},
            max_body=contract.MAX_BODY_BYTES, job=settings.job, on_loop=routes.on_loop(), urgent=routes.urgent(),
            long_running=LONG_RUNNING, deferred=self._service.deferred() if self._service else None)
        if isinstance(self._server, AgentServer):  # the peer client's I/O runs on the server's loop
            if isinstance(self._transport, HttpTransport):
                self._transport.use_loop(self._server.loop)
            if self._service is not None:
                self._service.use_loop(self._server.loop)

    @property
    def world(self) -> Optional[World]:
        """This node's current world (``None`` before one)."""
        return self.member.view.world

    def say(self, message: str) -> None:
        """Write one message, prefixed with the node, to the agent log (via its console: never inside a rank's line)."""
        prefix = f"[trainplane node {self.settings.node.node_id}] "
        if self._log is sys.stderr:
            console.default().write(self._console_writer, 1, prefix.encode(), f"{message}\n".encode())
            return
        self._log.write(prefix + message.replace("\n", "\n" + prefix) + "\n")
        self._log.flush()

    def send_signal(self, signum: int) -> None:
        """Handle ``signum`` as if it had arrived (what the handlers :meth:`run` installs on the main thread do)."""
        self._events.put(SignalReceived(signum))

    def run(self) -> int:
        """Serve, join the world, run processes until a verdict; return the exit code."""
        if self.settings.plumbing.die_with_parent:
            die_with_parent(signal.SIGTERM, parent_pid())
        if self.settings.plumbing.console_file:
            console.default().share(self.settings.plumbing.console_file)
        if threading.current_thread() is threading.main_thread():
            for sig in handled(self.member.signals):
                signal.signal(sig, lambda signum, _frame: self.send_signal(signum))
            # Inherited by user processes until their bootstrap installs its handler, so a change
            # that arrives while one is still starting cannot kill it (the bootstrap then polls).
            signal.signal(DELIVERY_SIGNAL, signal.SIG_IGN)
        self._server.start()
        try:
            if self._coordination.active and self.settings.node.peers:
                self._join_running_world()
            self._heartbeats.start()  # beats nowhere while this node coordinates (it may step down)
            code = self._apply(self.member.start(self._clock()))
            code = code if code is not None else self._loop()
            world = self.member.world  # a failed service job's coordinator tells its clients why (service.linger)
            if self._coordination.active and self.settings.spec.mode == "service" and world and world.status == FAILED:
                linger(self._events.get, self._clock, self.say)
            return code
        finally:
            self._stopping.set()
            self._wake.set()
            self._watch.close()
            self._processes.close()
            self._pusher.join(timeout=5.0)
            self._transport.close()
            self._server.stop()

    def _discover(self) -> Optional[tuple[str, int]]:
        """The coordinator of the world the other nodes run in, if they do (``discovery``): asked of the
        job's peers, or, when it names none, of the nodes of the last world this node held."""
        node, spec = self.settings.node, self.settings.spec
        peers = peer_addresses(node.peers, spec.max_nodes, node.agent_port) or list(self.member.view.known)
        return running_coordinator(peers, node.node_id, self._transport, self._resolver, self._clock)

    def _join_running_world(self) -> None:
        """Node 0 starting while the job already runs (its pod was replaced): join that world, under
        its coordinator, instead of starting a rendezvous of its own."""
        found = self._discover()
        if found is not None:
            self._apply(self.member.handle(CoordinatorFound(found, running=True), self._clock()))

    def _loop(self) -> int:
        while True:
            try:
                item = self._events.get(timeout=TICK if self._coordination.active else WORKER_TICK)
            except queue.Empty:
                item = Tick()
            if isinstance(item, _Decided):
                self._perform(item.actions)
            else:
                code = self._apply(self._handle(item))
                if code is not None:
                    return code
            self._coordinate()

    def _start(self, action: act.StartGeneration) -> None:
        """Start the processes of ``action.world``, unless a world that replaces it arrived while ranks stopped."""
        if not superseded(action.world, self._events.waiting(), self.node.node_id):
            self._processes.start(action.world)

    def _coordinate(self) -> None:
        """The coordinator's time-driven decisions; the watch follows the nodes this node hears directly."""
        self._perform(self._coordination.decide(self._tick))
        self._watch.follow(self._coordination.use(Coordinator.watched) or self._heartbeats.children())

    def _meanwhile(self) -> None:
        """While ranks are slow to stop: the decisions other threads took, then a tick (the node's events wait)."""
        for decided in self._events.take(_Decided):
            self._perform(decided.actions)
        self._coordinate()

    def _tick(self, coordinator: Coordinator) -> list[act.CoordinatorAction]:
        """The coordinator's time-driven decisions, its own node's ranks noted first (``stragglers``)."""
        now, world = self._clock(), coordinator.world
        if world is not None:
            ranks = [[rank, code, silent] for rank, code, silent in self._processes.activity()]
            coordinator.activity(self.node.node_id, world.generation, ranks, now)
        return coordinator.tick(now)

    def _handle(self, event: Event) -> tuple[act.MemberAction, ...]:
        news = isinstance(event, WorldArrived) and self.member.newer(event.world)
        actions = self.member.handle(event, self._clock())
        if news:
            self._wake.set()  # the heartbeat thread may be in a long pre-world wait
        return actions

    # --- performing actions --------------------------------------------------------------------

    def _apply(self, actions: Iterable[act.MemberAction]) -> Optional[int]:
        """Perform this node's actions, in order; the exit code if one says to exit."""
        actions = tuple(actions)
        exiting = any(isinstance(a, act.Exit) for a in actions)  # a stop before an exit decides nothing meanwhile
        perform: dict[type, Callable[[Any], None]] = {
            act.Say: lambda a: self.say(a.message),
            act.StopProcesses: lambda a: self._processes.stop(a.sig, None if exiting else self._meanwhile),
            act.StartGeneration: self._start,
            act.DeliverChange: lambda a: self._processes.deliver(a.previous, a.world),
            act.Register: lambda a: self._register(a.delay), act.Report: self._report,
            act.PassOn: lambda a: self._pass_on(a.signum), act.TakeOver: self._take_over,
            act.StopJob: lambda a: self._perform(self._coordination.decide(lambda c: c.stop(a.message, a.exit_code))),
            act.Finish: lambda a: self._write_verdict(a.world),
            act.Resign: lambda _a: self._coordination.resign(), act.AnswerVote: lambda a: a.reply(a.verdict),
            act.AskVotes: lambda a: voting.ask(a, self._transport, self._clock, self._events.put, self.node.node_id),
        }
        for action in actions:
            if isinstance(action, act.Exit):
                return action.code
            perform[type(action)](action)
        return None

    def _perform(self, actions: Iterable[act.CoordinatorAction]) -> None:
        """Perform the coordinator's actions."""
        for action in actions:
            if isinstance(action, act.Say):
                self.say(action.message)
            elif isinstance(action, act.Push):
                if self._pusher.push(action):
                    self._events.put(WorldArrived(action.world))
            elif isinstance(action, act.StepDown):
                self._coordination.resign()
                self._events.put(Deposed(action.reason, action.address if action.address[0] else (
                    "", self.settings.node.coordinator_port)))
            else:
                self._prober.probe(action)

    def _decide(self, decision: Callable[[Coordinator], list[act.CoordinatorAction]]) -> None:
        """A coordinator decision from a background thread: taken under the lock (only on the coordinator)."""
        decided = self._coordination.decide(decision)
        if decided:
            self._events.put(_Decided(tuple(decided)))

    def _suspect(self, suspects: dict[int, str]) -> None:
        """Nodes (id to why) whose connection was refused, reset or ended by them: probed now, or sent up at once."""
        if not self._probe_now(suspects):
            self._heartbeats.suspected(suspects)

    def _probe_now(self, suspects: dict[int, str]) -> bool:
        """Whether this node coordinates (checked under the role's lock), and so probes ``suspects`` now."""
        decided = self._coordination.attempt(lambda c: [p for i, why in suspects.items() for p in c.suspect(i, why)])
        if decided:
            self._events.put(_Decided(tuple(decided)))
        return decided is not None

    def _delivered(self, node: Node, generation: int, now: float) -> None:
        """``node`` accepted a world: proof of life, sent up with the next beat (on the coordinator: counted now)."""
        self._children.beat(node.node_id, now)
        self._coordination.use(lambda c: c.delivered(node.node_id, generation, now))

    def _register(self, delay: float) -> None:
        if not self._coordination.active:
            self._registration.start(delay)
            return

        def register() -> list[act.CoordinatorAction]:
            return self._coordination.decide(lambda c: c.register(self.node, self._clock()))

        def later() -> None:
            if not self._wait(self._stopping, delay):
                self._events.put(_Decided(tuple(register())))

        if delay <= 0:
            self._perform(register())
        else:
            threading.Thread(target=later, name="register", daemon=True).start()

    def _report(self, report: act.Report) -> None:
        """Tell the coordinator what this node's processes did: directly on it, else ``PUT /members`` (sent from a
        thread of its own unless the agent is about to exit)."""
        failure = self._processes.failure(report.exit, report.daemon) if report.exit is not None else None
        if self._coordination.active:
            self._events.put(_Decided(tuple(self._coordination.decide(lambda c: c.report(
                self.node.node_id, report.generation, report.state, failure, report.message, self._clock())))))
            return
        body: dict[str, Any] = {**self._member_body(), "generation": report.generation, "state": report.state,
                                **({"failure": failure.to_json()} if failure is not None else {}),
                                **({"message": report.message} if report.message else {})}
        if report.now:
            self._send_report(body)
        else:
            threading.Thread(target=self._send_report, args=(body,), daemon=True).start()

    def _send_report(self, body: dict[str, Any]) -> None:
        host, port = self.member.view.coordinator
        exchange = Exchange(host or self.settings.node.coordinator, port, "PUT", contract.ROUTE_MEMBERS, encode(body))
        try:
            self._transport.exchange(exchange, self._timing.ttl).result(exchange)
        except TransportError as exc:
            if body["state"] == STOPPED and exc.status is None:
                self.say(f"the coordinator did not answer this node's stop (it is likely stopping too): {exc}")
            else:
                self.say(f"could not report {body['state']} to the coordinator: {exc}")

    def _pass_on(self, signum: int) -> None:
        """Send a signal that does not stop the job to every rank of this node."""
        sent, world, me = self._processes.send(signum), self.member.world, self.node.node_id
        first = world.first_rank(world.node_rank_of(me)) if world is not None and world.has(me) else 0
        ranks = ", ".join(str(first + i) for i in sent) or "none (no process is running)"
        self.say(f"received {signal.Signals(signum).name}: passed on to rank(s) {ranks}")

    def _take_over(self, action: act.TakeOver) -> None:
        """Become the coordinator of the world whose coordinator is lost."""
        coordinator = Coordinator(self.settings, self._clock(), world=action.world, epoch=action.epoch,
                                  elapsed=action.elapsed)
        self._perform(self._coordination.take_over(
            coordinator, lambda c: c.lose(action.lost, f"coordinator node {action.lost} lost")))

    def _write_verdict(self, world: World) -> None:
        path = self.settings.plumbing.verdict_file
        if path and not verdict.record(path, world, self.node.node_id):
            self.say(f"{path} keeps a newer world's verdict than generation {world.generation} (epoch {world.epoch})")

    def _member_body(self) -> dict[str, Any]:
        node = self.node
        return {"node_id": node.node_id, "addr": node.addr, "port": node.port, "num_proc": node.num_proc}
