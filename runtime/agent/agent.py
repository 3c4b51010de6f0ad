"""The agent: one per node (pod). Performs what the coordinator decides and supervises processes.

All state changes happen on the main thread, which consumes one event queue: worlds pushed by the
coordinator, process exits, signals, heartbeat outcomes. HTTP handler threads only validate and
enqueue (the coordinator's decisions are taken under a lock and their actions enqueued too); the
heartbeat thread only sends and enqueues, so a heartbeat failure can never touch training.
Standard library only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import queue
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence, TextIO, Union

from runtime.agent import contract
from runtime.agent.errors import (
    HttpError,
    MembershipRefused,
    NotAMember,
    RendezvousError,
    TransportError,
    Unauthorized,
    WorkerMembershipChanged,
)
from runtime.agent.execution import controller, errorfile, torchrun
from runtime.agent.execution.bootstrap import die_with_parent
from runtime.agent.execution.delivery import DELIVERY_SIGNAL
from runtime.agent.execution.environment import process_env
from runtime.agent.execution.procs import LocalProcesses, ProcExit, Spawner, Supervisor, inherited_env, rank_dir
from runtime.agent.membership.coordinator import EXIT_NODE_LOST, Action, Coordinator, Probe, Push, Say
from runtime.agent.membership.heartbeat import HeartbeatTiming, Liveness
from runtime.agent.membership.tree import Layout, layout
from runtime.agent.net.peer import Answer, Exchange, PeerTransport
from runtime.agent.net.resolver import Resolver
from runtime.agent.net.server import AgentServer, Request, Response
from runtime.agent.net.transport import DEFAULT_TIMEOUT, HttpTransport, encode
from runtime.agent.service.dispatch import ServiceNode, batch_mode_routes
from runtime.agent.service.pool import WorkerPool
from runtime.agent.spec.settings import AgentSettings
from runtime.agent.spec.signals import STOP_SIGNALS, parse_signals
from runtime.agent.spec.signals import handled as handled_signals
from runtime.agent.world import FAILED, RUNNING, STOPPED, SUCCEEDED, TERMINAL, Failure, Node, World

TICK = 0.1
"""Seconds between the coordinator's time-driven checks (liveness, quorum)."""
WORKER_TICK = 1.0
"""Seconds between a worker's time-driven checks (only the wait for a first world); events wake it at once."""
WORLD_WAIT_MARGIN = 15.0
"""Seconds a registered worker waits for a world beyond the quorum timeout."""
PROBE_CONCURRENCY = 32
"""Probes in flight at once from the coordinator, so that many silent nodes make no thundering herd."""
RELAY = "relay"
"""Key of a pushed world's body: ``true`` asks the receiver to send the world on to its tree children."""
HEARTBEAT_LOG_EVERY = 20
"""After the first failed heartbeat in a row, log only every this many more."""


@dataclass(frozen=True)
class _WorldEvent:
    world: World


@dataclass(frozen=True)
class _SignalEvent:
    signum: int


@dataclass(frozen=True)
class _ActionsEvent:
    actions: tuple[Action, ...]


@dataclass(frozen=True)
class _FatalEvent:
    message: str
    exit_code: int


@dataclass(frozen=True)
class _RejoinEvent:
    reason: str


@dataclass(frozen=True)
class _CoordinatorLostEvent:
    coordinator: tuple[int, str, int]
    silent_for: float


@dataclass(frozen=True)
class _CoordinatorBackEvent:
    failures: int


@dataclass(frozen=True)
class _DaemonExit:
    name: str
    exit: ProcExit


_Event = Union[
    _WorldEvent, _SignalEvent, _ActionsEvent, _FatalEvent, _RejoinEvent, _CoordinatorLostEvent,
    _CoordinatorBackEvent, _DaemonExit, ProcExit,
]


def _change(previous: World, world: World) -> WorkerMembershipChanged:
    """The membership change from ``previous`` to ``world``, by node address."""
    return WorkerMembershipChanged.between([n.addr for n in previous.nodes], [n.addr for n in world.nodes],
                                           world.generation)


class Agent:
    """One node's agent.

    Args:
        settings: validated settings.
        resolver: the name-resolution seam (defaults to DNS with ``settings.plumbing.resolve`` overrides).
        log: text stream for the agent's own messages.
        clock: monotonic clock, seconds.
        spawner: the process-spawner seam; builds the supervisor of one generation's processes
            (default :class:`LocalProcesses`; benchmarks pass one that runs nothing).
    """

    def __init__(
        self,
        settings: AgentSettings,
        resolver: Optional[Resolver] = None,
        log: TextIO = sys.stderr,
        clock: Callable[[], float] = time.monotonic,
        spawner: Spawner = LocalProcesses,
        transport: Optional[PeerTransport] = None,
    ) -> None:
        self.settings = settings
        self._spawner = spawner
        self._resolver = resolver or Resolver(settings.plumbing.resolve)
        self._log = log
        self._clock = clock
        self._timing = HeartbeatTiming(settings.spec.heartbeat_interval, settings.spec.heartbeat_ttl)
        self._events: queue.SimpleQueue[_Event] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._registered = threading.Event()
        self._beat_now = threading.Event()
        self._world_deadline = float("inf")
        self._coordinator = Coordinator(settings, clock()) if settings.node.is_coordinator else None
        self._coordinator_addr: tuple[str, int] = ("", settings.node.coordinator_port)
        self._children = Liveness()
        self.world: Optional[World] = None
        self._procs: Optional[Supervisor] = None
        self._daemon: Optional[Supervisor] = None
        self._service = ServiceNode(
            settings, lambda: self.world, self.say,
            on_unreachable=lambda node: self._suspect(node, f"node {node.node_id} ({node.addr}) refused a call"),
        ) if settings.spec.mode == "service" else None
        self._exits: dict[int, ProcExit] = {}
        self._error_files: list[str] = []
        self._coordinator_lost = False
        self._pushers: list[threading.Thread] = []
        self._transport: PeerTransport = transport or HttpTransport(settings.token, clock)
        self._probe_slots = threading.BoundedSemaphore(PROBE_CONCURRENCY)
        self._worlds_sent = 0
        self._signals = parse_signals(settings.spec.signals_to_handle)
        self._omp_said = False
        if settings.plumbing.run_root:
            os.makedirs(settings.plumbing.run_root, exist_ok=True)
        self._run_dir = tempfile.mkdtemp(prefix=f"trainplane-{settings.spec.job_name}-{settings.node.node_id}-",
                                         dir=settings.plumbing.run_root)
        self.node = Node(settings.node.node_id, settings.node.advertise_address, settings.node.agent_port,
                         settings.local_world_size)
        self._server = AgentServer(
            (settings.node.bind_address, settings.node.agent_port),
            settings.token,
            {
                ("GET", contract.ROUTE_INFO): self._route_info,
                ("GET", contract.ROUTE_MEMBERS): self._route_get_members,
                ("PUT", contract.ROUTE_MEMBERS): self._route_put_members,
                ("POST", contract.ROUTE_WORLD): self._route_world,
                **(self._service.routes() if self._service is not None else batch_mode_routes()),
            },
            contract.MAX_BODY_BYTES,
        )

    # --- logging ---------------------------------------------------------------------------------

    def say(self, message: str) -> None:
        """Write one agent message, prefixed with the node, to the agent log."""
        prefix = f"[trainplane node {self.settings.node.node_id}] "
        self._log.write(prefix + message.replace("\n", "\n" + prefix) + "\n")
        self._log.flush()

    # --- HTTP routes (handler threads) ----------------------------------------------------------

    def _route_info(self, _request: Request) -> Response:
        world = self.world
        return Response(
            200,
            {
                "job": self.settings.spec.job_name,
                "node_id": self.settings.node.node_id,
                "node_rank": world.node_rank_of(self.settings.node.node_id) if world and self._in(world) else None,
                "addr": self.settings.node.advertise_address,
                "num_proc": self.settings.spec.num_proc,
                "generation": world.generation if world else 0,
                "status": world.status if world else "forming",
                "mode": self.settings.spec.mode,
                "distribution": self.settings.spec.distribution,
                "coordinator": self._coordinator is not None,
                "requests_served": self._server.requests_served,
                "worlds_sent": self._worlds_sent,
                "service": self._service.stats() if self._service is not None else None,
            },
        )

    def _route_get_members(self, _request: Request) -> Response:
        if self._coordinator is None:
            raise HttpError(404, "membership is served by the coordinator (node 0)")
        with self._lock:
            return Response(200, self._coordinator.snapshot(self._clock()))

    def _route_put_members(self, request: Request) -> Response:
        body = request.body
        try:
            node = Node(int(body["node_id"]), str(body["addr"]), int(body["port"]), int(body["num_proc"]))
            state = str(body.get("state", "joining"))
            generation = int(body.get("generation", 0))
            failure = Failure.from_json(body["failure"]) if body.get("failure") else None
            ages = {int(k): float(v) for k, v in (body.get("ages") or {}).items()}
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise HttpError(400, f"bad membership body: {exc!r}") from None
        if state == "alive":
            return self._heartbeat_from(node.node_id, generation, ages)
        if self._coordinator is None:
            raise HttpError(404, "registration goes to the coordinator")
        with self._lock:
            try:
                if state == "joining":
                    actions = self._coordinator.register(node, self._clock())
                else:
                    actions = self._coordinator.report(
                        node.node_id, generation, state, failure, str(body.get("message", ""))
                    )
            except MembershipRefused as exc:
                raise _refusal(exc) from None
            world = self._coordinator.world
        if actions:
            self._events.put(_ActionsEvent(tuple(actions)))
        return Response(200, {"generation": world.generation if world else 0})

    def _heartbeat_from(self, node_id: int, generation: int, ages: dict[int, float]) -> Response:
        """A child's heartbeat: record it (coordinator) or keep it for the next beat upward (parent)."""
        now = self._clock()
        if self._coordinator is not None:
            with self._lock:
                try:
                    self._coordinator.heartbeat(node_id, ages, now)
                except MembershipRefused as exc:
                    raise _refusal(exc) from None
                world = self._coordinator.world
        else:
            world = self.world
            behind = world is None or world.generation < generation
            if not behind and not world.has(node_id):
                raise HttpError(409, f"node {node_id} is not in this node's world; register again")
            self._children.beat(node_id, now)
            self._children.merge(ages, now)
        reply: dict[str, Any] = {"generation": world.generation if world else 0}
        if world is not None and world.generation > generation:
            reply["world"] = world.to_json()
        return Response(200, reply)

    def _route_world(self, request: Request) -> Response:
        """``POST /world``: a new world; with ``"relay": true``, also sent on to this node's subtree."""
        try:
            world = World.from_json(request.body)
        except (KeyError, TypeError, ValueError) as exc:
            raise HttpError(400, f"bad world: {exc!r}") from None
        if world.job != self.settings.spec.job_name:
            raise HttpError(409, f"world of job {world.job!r} sent to job {self.settings.spec.job_name!r}")
        self._events.put(_WorldEvent(world))
        if request.body.get(RELAY) is True and world.has(self.settings.node.node_id):
            position = world.node_rank_of(self.settings.node.node_id)
            self._send_worlds(world, self._tree_children(world, position), relay=True)
        return Response(200, {"accepted": world.generation})

    # --- main loop -----------------------------------------------------------------------------

    def run(self) -> int:
        """Serve, join the world, run processes until a verdict; return the exit code."""
        if self.settings.plumbing.die_with_parent:
            die_with_parent(signal.SIGTERM)
        if threading.current_thread() is threading.main_thread():
            for sig in handled_signals(self._signals):
                signal.signal(sig, lambda signum, _frame: self._events.put(_SignalEvent(signum)))
            # Inherited by user processes until their bootstrap installs its handler, so a change
            # that arrives while one is still starting cannot kill it (the bootstrap then polls).
            signal.signal(DELIVERY_SIGNAL, signal.SIG_IGN)
        self._server.start()
        try:
            if self._coordinator is not None:
                with self._lock:
                    actions = self._coordinator.register(self.node, self._clock())
                self._perform(actions)
            else:
                self._start_registration()
                threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True).start()
            return self._loop()
        finally:
            self._stopping.set()
            self._beat_now.set()
            self._stop_processes()
            for pusher in self._pushers:
                pusher.join(timeout=5.0)
            self._transport.close()
            self._server.stop()
            shutil.rmtree(self._run_dir, ignore_errors=True)

    def _loop(self) -> int:
        while True:
            try:
                event = self._events.get(timeout=TICK if self._coordinator is not None else WORKER_TICK)
            except queue.Empty:
                event = None
            if event is not None:
                code = self._handle(event)
                if code is not None:
                    return code
            if self._coordinator is not None:
                with self._lock:
                    actions = self._coordinator.tick(self._clock())
                self._perform(actions)
            elif self.world is None and self._clock() > self._world_deadline:
                waited = self.settings.spec.quorum_timeout + WORLD_WAIT_MARGIN
                self.say(f"no world from the coordinator within {waited:g} s of registering; giving up")
                return contract.EXIT_RENDEZVOUS

    def _handle(self, event: _Event) -> Optional[int]:
        if isinstance(event, _WorldEvent):
            return self._on_world(event.world)
        if isinstance(event, ProcExit):
            return self._on_exit(event)
        if isinstance(event, _DaemonExit):
            return self._on_daemon_exit(event)
        if isinstance(event, _ActionsEvent):
            self._perform(event.actions)
            return None
        if isinstance(event, _SignalEvent):
            return self._on_signal(event.signum)
        if isinstance(event, _RejoinEvent):
            return self._on_rejoin(event.reason)
        if isinstance(event, _CoordinatorLostEvent):
            return self._on_coordinator_lost(event)
        if isinstance(event, _CoordinatorBackEvent):
            self.say(f"the coordinator answers again after {event.failures} failed heartbeat(s)")
            self._coordinator_lost = False
            return None
        self.say(event.message)
        return event.exit_code

    def _perform(self, actions: Iterable[Action]) -> None:
        for action in actions:
            if isinstance(action, Say):
                self.say(action.message)
            elif isinstance(action, Push):
                self._push(action)
            elif isinstance(action, Probe):
                threading.Thread(target=self._probe, args=(action,), name="probe", daemon=True).start()

    def _probe(self, probe: Probe) -> None:
        """Ask a silent or refusing node's agent whether it is up; the coordinator decides on the answer."""
        node = probe.node
        exchange = Exchange(node.addr, node.port, "GET", contract.ROUTE_HEALTHZ)
        with self._probe_slots:
            answer = self._transport.exchange(exchange, self._timing.probe_timeout)
        try:
            answer.result(exchange)
            alive, reason = True, probe.reason
        except TransportError as exc:
            alive, reason = False, f"{probe.reason}, and a direct probe failed: {exc}"
        self._decide(lambda coordinator: coordinator.probed(probe, alive, reason, self._clock()))

    def _suspect(self, node: Node, reason: str) -> None:
        """A connection to ``node`` was refused: on the coordinator, probe it now rather than wait
        out its heartbeat TTL (elsewhere its silence reaches the coordinator the usual way)."""
        self._decide(lambda coordinator: coordinator.suspect(node.node_id, reason))

    def _decide(self, decision: Callable[[Coordinator], list[Action]]) -> None:
        """Take a coordinator decision from a background thread: under the lock, and only on the
        coordinator; its actions go to the main loop."""
        with self._lock:
            actions = decision(self._coordinator) if self._coordinator is not None else []
        if actions:
            self._events.put(_ActionsEvent(tuple(actions)))

    def _push(self, push: Push) -> None:
        """Send a world to its targets: along the tree when the world has one and goes to all its
        members (each node relays to its tree children, so the coordinator sends at most
        ``tree_fanout`` copies); directly otherwise, and to targets outside the world (nodes being
        told that they were removed)."""
        world, me = push.world, self.settings.node.node_id
        if any(n.node_id == me for n in push.targets):
            self._events.put(_WorldEvent(world))
        others = [n for n in push.targets if n.node_id != me]
        members = {n.node_id for n in push.targets if world.has(n.node_id)}
        if len(members) == len(world.nodes) and self._tree(world).tree:
            self._send_worlds(world, self._tree_heads(world), relay=True)
            others = [n for n in others if not world.has(n.node_id)]
        self._send_worlds(world, others, relay=False)

    def _tree_heads(self, world: World) -> list[Node]:
        """Where the coordinator sends a world for relaying: the root's children when it is the root
        (as it is unless it failed over), else the root, whose subtree is the whole world."""
        if world.nodes[0].node_id != self.settings.node.node_id:
            return [world.nodes[0]]
        return self._tree_children(world, 0)

    def _tree(self, world: World) -> Layout:
        """The tree over ``world``'s members (``runtime.agent.membership.tree``)."""
        return layout(len(world.nodes), self.settings.spec.tree_fanout, self.settings.spec.tree_threshold)

    def _tree_children(self, world: World, position: int) -> list[Node]:
        """The nodes that report to (and get worlds and calls from) the node at ``position``."""
        return [world.nodes[c] for c in self._tree(world).children(position)]

    def _send_worlds(self, world: World, targets: Sequence[Node], relay: bool) -> None:
        """Send ``world`` to ``targets`` from one background thread, all at once (a transport batch):
        a thread per target made the receiving handler of a relayed world wait on thread starts."""
        if not targets:
            return
        body = json.dumps({**world.to_json(), RELAY: relay}).encode()
        thread = threading.Thread(target=self._deliver_worlds,
                                  args=(world.generation, tuple(targets), body, world.status in TERMINAL),
                                  name="push", daemon=True)
        thread.start()
        self._pushers = [t for t in self._pushers if t.is_alive()] + [thread]

    def _deliver_worlds(self, generation: int, targets: tuple[Node, ...], body: bytes, final: bool) -> None:
        exchanges = [Exchange(n.addr, n.port, "POST", contract.ROUTE_WORLD, body) for n in targets]
        answers: list[Answer] = []
        self._transport.batch(exchanges, self._clock() + self._timing.ttl).run(answers.append)
        now = self._clock()
        for answer in answers:
            node = targets[answer.index]
            if not answer.ok:
                if final:
                    continue  # the job is over: a node already gone has nothing left to learn
                self.say(f"could not send a world to node {node.node_id} (its heartbeat will fetch it): "
                         f"{answer.problem}")
                if answer.refused:
                    self._suspect(node, f"node {node.node_id} ({node.addr}) refused a world push")
                continue
            self._children.beat(node.node_id, now)  # proof of life, forwarded with this node's next beat
            with self._lock:
                self._worlds_sent += 1
                if self._coordinator is not None:
                    self._coordinator.delivered(node.node_id, generation, now)

    def _in(self, world: World) -> bool:
        return world.has(self.settings.node.node_id)

    # --- worlds --------------------------------------------------------------------------------

    def _on_world(self, world: World) -> Optional[int]:
        previous = self.world
        if previous is not None and (world.generation, world.status in TERMINAL) <= (
            previous.generation, previous.status in TERMINAL
        ):
            return None  # older, or a second copy (a push and a heartbeat reply can both bring one)
        self.world = world
        self._beat_now.set()  # the heartbeat loop may be in a long pre-world wait
        if world.coordinator[1]:
            self._coordinator_addr = (world.coordinator[1], world.coordinator[2])
        if world.status in TERMINAL:
            return self._finish(world)
        if not self._in(world):
            self._stop_processes()
            return self._on_rejoin(f"generation {world.generation} does not include this node")
        same_epoch = (
            previous is not None and previous.status == RUNNING and self._in(previous)
            and previous.restart_count == world.restart_count and self._procs is not None
        )
        if same_epoch and previous is not None:
            self._deliver(previous, world)
            return None
        self._stop_processes()
        self._start(world)
        return None

    def _stop_processes(self, sig: int = signal.SIGTERM) -> None:
        """Stop this node's user processes and its framework daemon, if any (each: ``sig``, SIGTERM
        unless a stop signal is being passed on, then SIGKILL after the grace period); their exits
        are not failures."""
        for supervisor in (self._procs, self._daemon):
            if supervisor is not None:
                supervisor.stop(self.settings.spec.grace_period, sig)
        self._procs = self._daemon = None

    def _world_file(self, local_rank: int) -> str:
        return os.path.join(self._run_dir, f"world-{local_rank}.json")

    def _write_world_file(self, local_rank: int, state: dict[str, Any]) -> None:
        path = self._world_file(local_rank)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(json.dumps(state))  # one write; json.dump's many small ones cost 5x at 1,000 nodes
        os.replace(tmp, path)

    def _world_state(self, change: WorkerMembershipChanged, world: World, local_rank: int) -> dict[str, Any]:
        """What one process's world file says: the change and that process's new environment."""
        return {
            "generation": change.generation,
            "env": self._process_env(world, local_rank),
            "added_ips": list(change.added_ips),
            "removed_ips": list(change.removed_ips),
            "previous_ips": list(change.previous_ips),
            "current_ips": list(change.current_ips),
        }

    def _deliver(self, previous: World, world: World) -> None:
        """Tell this node's live processes about the new world (file, then signal); in service mode,
        fail the calls in flight with the change."""
        change = _change(previous, world)
        if self._service is not None:
            self._service.fail_in_flight(change)
        if self._procs is None:
            return
        self._procs.renumber(world.first_rank(world.node_rank_of(self.settings.node.node_id)))
        for local_rank in range(self.node.num_proc):
            self._write_world_file(local_rank, self._world_state(change, world, local_rank))
            if self.settings.spec.monitor_members:
                self._procs.send(local_rank, DELIVERY_SIGNAL)

    def _driver_wait(self, world: World) -> dict[str, str]:
        """A single-controller driver's bootstrap settings: what it waits for, for how long."""
        wait = controller.driver_wait(world)
        if not wait.endpoints:
            return {}
        env = {contract.WAIT_FOR: ",".join(wait.endpoints),
               contract.WAIT_TIMEOUT: str(self.settings.spec.quorum_timeout)}
        if wait.ray_nodes:
            env[contract.WAIT_RAY_NODES] = ",".join(wait.ray_nodes)
        return env

    def _process_env(self, world: World, local_rank: int) -> dict[str, str]:
        """The world's part of one process's environment (what a membership change updates)."""
        env = process_env(world, world.node_rank_of(self.settings.node.node_id), local_rank, self.settings.spec.role)
        if self.settings.spec.virtual_local_rank:
            env[contract.LOCAL_RANK] = "0"
        return env

    def _error_file(self, log_dir: Optional[str], generation: int, local_rank: int) -> str:
        """Where a process's ``@record`` writes its exception (``TORCHELASTIC_ERROR_FILE``): beside its
        logs, as torchrun keeps it, else in this agent's run directory."""
        parent = Path(log_dir) if log_dir else Path(self._run_dir, f"gen-{generation}")
        return str(rank_dir(parent, local_rank) / "error.json")

    def _start(self, world: World) -> None:
        node_rank = world.node_rank_of(self.settings.node.node_id)
        base = inherited_env(os.environ)
        envs = []
        unchanged = _change(world, world)
        wait = self._driver_wait(world)
        base_log = self.settings.spec.log_dir
        log_dir = os.path.join(base_log, f"gen-{world.generation}") if base_log else None
        self._error_files = []
        for i in range(self.node.num_proc):
            self._write_world_file(i, self._world_state(unchanged, world, i))
            error_file = self._error_file(log_dir, world.generation, i)
            os.makedirs(os.path.dirname(error_file), exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                os.remove(error_file)  # a restart's processes start without their predecessor's error
            self._error_files.append(error_file)
            envs.append({
                **base, **self._process_env(world, i), **wait,
                **torchrun.worker_env(base, i, self.node.num_proc, self.settings.spec.signals_to_handle, error_file,
                                      self.settings.spec.virtual_local_rank),
                contract.TRAINPLANE_WORLD_FILE: self._world_file(i),
                contract.MONITOR_MEMBERS: "true" if self.settings.spec.monitor_members else "false",
            })
        if torchrun.omp_num_threads(base, self.node.num_proc) is not None and not self._omp_said:
            self._omp_said = True
            self.say(torchrun.omp_notice(self.node.num_proc))
        self._exits = {}
        daemon = controller.daemon(world, node_rank, prefix=self.settings.plumbing.daemon_prefix,
                                   extra_args=self.settings.spec.daemon_args)
        if daemon is not None:
            self._daemon = self._spawn_daemon(world, node_rank, daemon, base, log_dir)
        stdin = 0 if self.settings.plumbing.forward_stdin and world.first_rank(node_rank) == 0 else None
        if self._service is not None:
            pool = WorkerPool(world.generation, node_rank, world.first_rank(node_rank), envs, self.say,
                              self.settings.spec.grace_period, log_dir)
            self._service.use_executor(pool)
            self._procs = pool
        else:
            self._procs = self._spawner(
                world.generation, world.first_rank(node_rank), envs, self.settings.spec.entrypoint,
                self._events.put, log_dir, no_python=self.settings.spec.no_python, outputs=self.settings.spec.outputs,
                stdin_local_rank=stdin,
            )
        first = world.first_rank(node_rank)
        runs = f"ranks {first}..{first + self.node.num_proc - 1} of {world.world_size}"
        if daemon is not None:
            runs = f"the {daemon.name}" + (f" and the driver (rank {first} of {world.world_size})"
                                           if self.node.num_proc else "")
        self.say(f"generation {world.generation}: node rank {node_rank} of {len(world.nodes)} runs {runs}, "
                 f"master {world.master_addr}:{world.rendezvous_port} (agent pid {os.getpid()})")
        if self._daemon is not None:
            self._daemon.start()
        self._procs.start()

    def _spawn_daemon(self, world: World, node_rank: int, daemon: controller.Daemon, base: dict[str, str],
                      log_dir: Optional[str]) -> Supervisor:
        """The supervisor of this node's framework daemon, not yet started: ``runtime.agent.execution.daemon``
        under the bootstrap, which waits for the head if the daemon needs it, then becomes the daemon."""
        env = {**base, contract.MONITOR_MEMBERS: "false"}
        if daemon.wait_for:
            env[contract.WAIT_FOR] = daemon.wait_for
        return self._spawner(
            world.generation, node_rank, [env], ("-m", "runtime.agent.execution.daemon", daemon.name, *daemon.argv),
            lambda event: self._events.put(_DaemonExit(daemon.name, event)), log_dir, label=daemon.name,
        )

    # --- process exits -------------------------------------------------------------------------

    def _on_exit(self, event: ProcExit) -> Optional[int]:
        world = self.world
        procs = self._procs
        if world is None or procs is None or event.generation != procs.generation or event.requested:
            return None
        self._exits[event.local_rank] = event
        done = len(self._exits) == self.node.num_proc
        if self._coordinator_lost:
            if event.exit_code != 0 or done:
                self.say(f"rank {event.rank} exited with code {event.exit_code} while the coordinator is "
                         f"unreachable; stopping this node")
                return event.exit_code or max(e.exit_code for e in self._exits.values())
            return None
        if world.status != RUNNING:
            return None
        if event.exit_code != 0:
            self._report_failure(world, event, event.rank, event.local_rank)
        elif done and all(e.exit_code == 0 for e in self._exits.values()):
            self._report(world.generation, SUCCEEDED)
        return None

    def _on_daemon_exit(self, event: _DaemonExit) -> Optional[int]:
        """This node's framework daemon ended: a failure if it exited non-zero while the world runs
        (the driver's exit, not the daemon's, decides success); exit 0 (e.g. a Monarch host shut
        down by the driver) is the daemon's own business."""
        world, daemon, ended = self.world, self._daemon, event.exit
        if world is None or daemon is None or ended.generation != daemon.generation or ended.requested:
            return None
        if ended.exit_code == 0:
            self.say(f"the {event.name} daemon exited with code 0")
            return None
        if self._coordinator_lost:
            self.say(f"the {event.name} daemon exited with code {ended.exit_code} while the coordinator is "
                     f"unreachable; stopping this node")
            return ended.exit_code
        if world.status == RUNNING:
            self._report_failure(world, ended, -1, -1, daemon=event.name)
        return None

    def _report_failure(self, world: World, ended: ProcExit, rank: int, local_rank: int, daemon: str = "") -> None:
        """Tell the coordinator that a process of this node (a rank, or the ``daemon``) failed."""
        recorded = errorfile.read(self._error_files[local_rank]) if 0 <= local_rank < len(self._error_files) else None
        failure = Failure(
            rank=rank, node_id=self.settings.node.node_id, local_rank=local_rank, exit_code=ended.exit_code,
            stderr_tail=ended.stderr_tail, timestamp=ended.timestamp, addr=self.settings.node.advertise_address,
            daemon=daemon, error=recorded.describe() if recorded else "",
            error_traceback=recorded.traceback if recorded else (),
        )
        self._report(world.generation, FAILED, failure=failure.to_json())

    def _report(self, generation: int, state: str, **extra: Any) -> None:
        body = {**self._member_body(), "generation": generation, "state": state, **extra}
        if self._coordinator is not None:
            self._route_put_members(Request("PUT", contract.ROUTE_MEMBERS, body, "local"))
            return
        threading.Thread(target=self._send_report, args=(body,), daemon=True).start()

    def _send_report(self, body: dict[str, Any]) -> None:
        host, port = self._coordinator_addr
        try:
            self._to_coordinator(host or self.settings.node.coordinator, port, body, self._timing.ttl)
        except TransportError as exc:
            if body["state"] == STOPPED and exc.status is None:
                self.say(f"the coordinator did not answer this node's stop (it is likely stopping too): {exc}")
            else:
                self.say(f"could not report {body['state']} to the coordinator: {exc}")

    def _to_coordinator(self, host: str, port: int, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        """``PUT /members`` to the coordinator at ``host:port``.

        Raises:
            TransportError: as ``peer.Answer.result``.
        """
        exchange = Exchange(host, port, "PUT", contract.ROUTE_MEMBERS, encode(body))
        return self._transport.exchange(exchange, timeout).result(exchange)

    def _member_body(self) -> dict[str, Any]:
        return {"node_id": self.node.node_id, "addr": self.node.addr, "port": self.node.port,
                "num_proc": self.node.num_proc}

    def _finish(self, world: World) -> int:
        self._stop_processes()
        if self._coordinator is None:
            if world.status == FAILED:
                self.say(f"job failed: {world.message.split(';')[0] if world.message else 'see the coordinator'}")
            elif world.status == STOPPED:
                self.say(f"job stopped: {world.message}")
        if self.settings.plumbing.verdict_file:
            tmp = f"{self.settings.plumbing.verdict_file}.{self.settings.node.node_id}.tmp"
            with open(tmp, "w") as f:
                json.dump({"status": world.status, "exit_code": world.exit_code, "message": world.message}, f)
            os.replace(tmp, self.settings.plumbing.verdict_file)
        return world.exit_code

    def _on_signal(self, signum: int) -> Optional[int]:
        name = signal.Signals(signum).name
        if signum not in STOP_SIGNALS:
            self._pass_on(signum, name)
            return None
        code = contract.EXIT_INTERRUPTED_BASE + signum
        passed = signum if signum in self._signals else signal.SIGTERM
        self.say(f"received {name}: stopping processes" + (f" ({name} to each)" if passed != signal.SIGTERM else ""))
        self._stop_processes(passed)
        if self._coordinator is not None:
            with self._lock:
                actions = self._coordinator.stop(f"the coordinator received {name}", code)
            self._perform(a for a in actions if isinstance(a, Push) and self._others(a))
        elif self.world is not None and self.world.status == RUNNING:
            body = {**self._member_body(), "generation": self.world.generation, "state": "stopped",
                    "message": f"received {name}"}
            self._send_report(body)
        return code

    def _pass_on(self, signum: int, name: str) -> None:
        """A signal that does not stop the job: send it to every rank of this node if
        ``signals_to_handle`` names it (a preemption notice a rank may checkpoint on); else say so
        and ignore it. Either way the job goes on."""
        procs = self._procs
        if signum not in self._signals:
            self.say(f"received {name}, which {contract.TORCHELASTIC_SIGNALS_TO_HANDLE} "
                     f"({self.settings.spec.signals_to_handle}) does not name: ignored")
            return
        sent = [i for i in range(self.node.num_proc) if procs is not None and procs.send(i, signum)]
        first = self.world.first_rank(self.world.node_rank_of(self.settings.node.node_id)) if self.world and self._in(
            self.world) else 0
        ranks = ", ".join(str(first + i) for i in sent) or "none (no process is running)"
        self.say(f"received {name}: passed on to rank(s) {ranks}")

    def _others(self, push: Push) -> bool:
        return any(n.node_id != self.settings.node.node_id for n in push.targets)

    # --- membership: rejoin and coordinator loss -------------------------------------------------

    def _on_rejoin(self, reason: str) -> Optional[int]:
        self._stop_processes()
        if not self.settings.spec.elastic:
            self.say(f"removed from the job ({reason}); the job is not elastic, so this node stops")
            return contract.EXIT_RENDEZVOUS
        self.say(f"{reason}: registering again in {self._timing.ttl:g} s")
        self.world = None
        self._registered.clear()
        if self._coordinator is not None:
            threading.Timer(self._timing.ttl, self._register_locally).start()
        else:
            self._start_registration(delay=self._timing.ttl)
        return None

    def _register_locally(self) -> None:
        with self._lock:
            actions = self._coordinator.register(self.node, self._clock()) if self._coordinator else []
        self._events.put(_ActionsEvent(tuple(actions)))

    def _on_coordinator_lost(self, event: _CoordinatorLostEvent) -> Optional[int]:
        world = self.world
        lost_id, addr, _ = event.coordinator
        if world is None or world.coordinator != event.coordinator or self._coordinator is not None:
            return None
        survivors = [n for n in world.nodes if n.node_id != lost_id]
        if self._daemon is not None and not self.node.num_proc:
            self.say(f"the coordinator (node {lost_id} at {addr}), which runs the driver, has been unreachable "
                     f"for {event.silent_for:.1f} s; this node's {world.distribution} daemon serves nobody: stopping")
            return EXIT_NODE_LOST
        if not self.settings.spec.elastic or not survivors:
            self._coordinator_lost = True
            self.say(f"the coordinator (node {lost_id} at {addr}) has been unreachable for {event.silent_for:.1f} s; "
                     f"training continues, and this node stops when its processes end")
            return None
        successor = min(survivors, key=lambda n: n.node_id)
        if successor.node_id != self.settings.node.node_id:
            return None
        self.say(f"the coordinator (node {lost_id} at {addr}) is lost; node {self.settings.node.node_id} takes over")
        coordinator = Coordinator(self.settings, self._clock(), world=world)
        with self._lock:
            self._coordinator = coordinator
            actions = coordinator.lose(lost_id, f"coordinator node {lost_id} lost")
        self._perform(actions)
        return None

    # --- registration and heartbeats (background threads) ---------------------------------------

    def _start_registration(self, delay: float = 0.0) -> None:
        """Register from a background thread after ``delay`` seconds.

        A node dropped from the world waits one TTL before it asks to come back (as Kubernetes backs
        off a crashing container), so the survivors can re-form their process group first instead
        of being interrupted again mid-rendezvous.
        """
        self._world_deadline = self._clock() + delay + self.settings.spec.quorum_timeout + WORLD_WAIT_MARGIN
        threading.Thread(target=self._register, args=(delay,), name="register", daemon=True).start()

    def _register(self, delay: float) -> None:
        """Resolve the coordinator and register, retrying with backoff until the quorum timeout."""
        if self._stopping.wait(delay):
            return
        s = self.settings
        deadline = self._clock() + s.spec.quorum_timeout
        host, port = self._coordinator_addr
        if not host:
            try:
                host = self._resolver.resolve(s.node.coordinator, s.spec.quorum_timeout)
            except RendezvousError as exc:
                self._events.put(_FatalEvent(str(exc), contract.EXIT_RENDEZVOUS))
                return
            self._coordinator_addr = (host, port)
        delay = 0.05
        body = {**self._member_body(), "state": "joining"}
        while not self._stopping.is_set():
            try:
                self._to_coordinator(host, port, body, DEFAULT_TIMEOUT)
                self._registered.set()
                return
            except Unauthorized as exc:
                message = f"the coordinator refused this node's token: {exc}"
                self._events.put(_FatalEvent(message, contract.EXIT_RENDEZVOUS))
                return
            except TransportError as exc:
                if exc.status is not None:
                    self._events.put(_FatalEvent(f"registration refused: {exc}", contract.EXIT_RENDEZVOUS))
                    return
                if self._clock() + delay > deadline:
                    self._events.put(_FatalEvent(
                        f"coordinator {host}:{port} unreachable for {s.spec.quorum_timeout:g} s: {exc}",
                        contract.EXIT_RENDEZVOUS,
                    ))
                    return
            self._stopping.wait(delay)
            delay = min(delay * 2, 1.0)

    def _heartbeat_target(self, world: World) -> tuple[str, int]:
        """This node's parent in the liveness tree, or the coordinator."""
        tree = self._tree(world)
        up = tree.parent(world.node_rank_of(self.settings.node.node_id))
        if up is None or world.nodes[up].node_id == world.coordinator[0] or not tree.tree:
            return self._coordinator_addr
        return world.nodes[up].addr, world.nodes[up].port

    def _heartbeat_loop(self) -> None:
        """Beat to the parent (or coordinator) until the agent stops. Never raises, never blocks training."""
        interval = 0.0
        generation = 0
        last_ok = self._clock()
        failures = 0
        direct = False
        lost_sent: Optional[tuple[int, str, int]] = None
        while True:
            self._beat_now.wait(interval or self._timing.interval)
            self._beat_now.clear()
            if self._stopping.is_set():
                return
            world = self.world
            now = self._clock()
            waiting = world is None and self._registered.is_set()
            if self._coordinator is not None or (not waiting and (
                world is None or world.status != RUNNING or not self._in(world)
            )):
                interval, last_ok = 0.0, now
                continue
            if world is None:
                # Registered, no world yet: ask once per TTL (a lost push heals; the coordinator is
                # not flooded while a large world forms).
                if interval < self._timing.ttl:
                    interval = self._timing.ttl
                    continue
                host, port, ages, generation = *self._coordinator_addr, {}, 0
            else:
                if world.generation != generation:
                    self._timing = dataclasses.replace(self._timing, hops=self._tree(world).hops)
                    generation, interval = world.generation, self._timing.first_delay(random.random())
                    continue
                host, port = self._coordinator_addr if direct else self._heartbeat_target(world)
                ages = {k: round(v, 3) for k, v in self._children.ages(now).items() if world.has(k)}
            body = {**self._member_body(), "generation": generation, "state": "alive", "ages": ages}
            exchange = Exchange(host, port, "PUT", contract.ROUTE_MEMBERS, encode(body))
            try:
                reply = self._transport.exchange(exchange, self._timing.cap).result(exchange)
            except TransportError as exc:
                if exc.status == 409 and (host, port) != self._coordinator_addr:
                    direct, interval = True, 0.0
                    continue
                if exc.status == 409:
                    self._events.put(_RejoinEvent(f"the coordinator no longer counts this node ({exc})"))
                    interval = self._timing.interval
                    continue
                failures += 1
                if failures == 1 or failures % HEARTBEAT_LOG_EVERY == 0:
                    self.say(f"heartbeat to {host}:{port} failed ({failures} in a row): {exc}")
                # A silent parent is the coordinator's to probe (and its orphans after it): going
                # straight to the coordinator instead made every child of a busy parent a herd.
                direct = False
                interval = self._timing.next_interval(interval)
                silent = self._clock() - last_ok
                lost = silent > self._timing.ttl and (host, port) == self._coordinator_addr
                if world is not None and lost and lost_sent != world.coordinator:
                    lost_sent = world.coordinator
                    self._events.put(_CoordinatorLostEvent(world.coordinator, silent))
                continue
            if failures:
                self._events.put(_CoordinatorBackEvent(failures))
                lost_sent = None
            failures, direct, last_ok = 0, False, self._clock()
            interval = self._timing.ttl if world is None else self._timing.next_interval(interval)
            if "world" in reply:
                try:
                    self._events.put(_WorldEvent(World.from_json(reply["world"])))
                except (KeyError, TypeError, ValueError) as exc:
                    self.say(f"ignoring a malformed world in a heartbeat reply: {exc!r}")


def _refusal(exc: MembershipRefused) -> HttpError:
    """How the HTTP layer answers a membership refusal: 400 for a node id outside the job, else 409."""
    return HttpError(400 if isinstance(exc, NotAMember) else 409, str(exc))
