"""The agent: one per node (pod). Performs what the coordinator decides and supervises processes.

All state changes happen on the main thread, which consumes one event queue: worlds pushed by the
coordinator, process exits, signals. HTTP handler threads only validate and enqueue (the
coordinator's decisions are taken under a lock and their actions enqueued too). Standard library only.
"""

from __future__ import annotations

import os
import queue
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, TextIO, Union

from runtime.agent import contract
from runtime.agent.bootstrap import die_with_parent
from runtime.agent.coordinator import Action, Coordinator, Push, Rejected, Say
from runtime.agent.dispatch import ServiceNode, batch_mode_routes
from runtime.agent.errors import RendezvousError, TransportError, Unauthorized
from runtime.agent.procs import LocalProcesses, ProcExit, Supervised
from runtime.agent.resolver import Resolver
from runtime.agent.settings import AgentSettings
from runtime.agent.transport import AgentServer, HttpError, Request, Response, request_json
from runtime.agent.world import FAILED, RUNNING, SUCCEEDED, TERMINAL, Failure, Node, World, process_env

TICK = 0.1
"""Seconds between time-driven checks of the main loop."""
WORLD_WAIT_MARGIN = 15.0
"""Seconds a registered worker waits for a world beyond the quorum timeout."""


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


_Event = Union[_WorldEvent, _SignalEvent, _ActionsEvent, _FatalEvent, ProcExit]


class Agent:
    """One node's agent.

    Args:
        settings: validated settings.
        resolver: the name-resolution seam (defaults to DNS with ``settings.resolve`` overrides).
        log: text stream for the agent's own messages.
        clock: monotonic clock, seconds.
    """

    def __init__(
        self,
        settings: AgentSettings,
        resolver: Optional[Resolver] = None,
        log: TextIO = sys.stderr,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self._resolver = resolver or Resolver(settings.resolve)
        self._log = log
        self._clock = clock
        self._events: queue.SimpleQueue[_Event] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._coordinator = Coordinator(settings, clock()) if settings.is_coordinator else None
        self._coordinator_addr = ""
        self.world: Optional[World] = None
        self._procs: Optional[Supervised] = None
        self._service = ServiceNode(settings, lambda: self.world, self.say) if settings.mode == "service" else None
        self._exits: dict[int, ProcExit] = {}
        self._reported: set[int] = set()
        self._pushers: list[threading.Thread] = []
        self.node = Node(settings.node_id, settings.advertise_address, settings.agent_port, settings.num_proc)
        self._server = AgentServer(
            (settings.bind_address, settings.agent_port),
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
        prefix = f"[trainplane node {self.settings.node_id}] "
        self._log.write(prefix + message.replace("\n", "\n" + prefix) + "\n")
        self._log.flush()

    # --- HTTP routes (handler threads) ----------------------------------------------------------

    def _route_info(self, _request: Request) -> Response:
        world = self.world
        return Response(
            200,
            {
                "job": self.settings.job,
                "node_id": self.settings.node_id,
                "node_rank": world.node_rank_of(self.settings.node_id) if world and self._in(world) else None,
                "addr": self.settings.advertise_address,
                "num_proc": self.settings.num_proc,
                "generation": world.generation if world else 0,
                "status": world.status if world else "forming",
                "mode": self.settings.mode,
                "service": self._service.stats() if self._service is not None else None,
            },
        )

    def _route_get_members(self, _request: Request) -> Response:
        if self._coordinator is None:
            raise HttpError(404, "membership is served by the coordinator (node 0)")
        with self._lock:
            return Response(200, self._coordinator.snapshot())

    def _route_put_members(self, request: Request) -> Response:
        if self._coordinator is None:
            raise HttpError(404, "registration goes to the coordinator (node 0)")
        body = request.body
        try:
            node = Node(int(body["node_id"]), str(body["addr"]), int(body["port"]), int(body["num_proc"]))
            state = str(body.get("state", "joining"))
            generation = int(body.get("generation", 0))
            failure = Failure.from_json(body["failure"]) if body.get("failure") else None
        except (KeyError, TypeError, ValueError) as exc:
            raise HttpError(400, f"bad membership body: {exc!r}") from None
        with self._lock:
            try:
                if state == "joining":
                    actions = self._coordinator.register(node, self._clock())
                else:
                    actions = self._coordinator.report(
                        node.node_id, generation, state, failure, str(body.get("message", ""))
                    )
            except Rejected as exc:
                raise HttpError(exc.status, str(exc)) from None
            snapshot = self._coordinator.snapshot()
        if actions:
            self._events.put(_ActionsEvent(tuple(actions)))
        return Response(200, snapshot)

    def _route_world(self, request: Request) -> Response:
        try:
            world = World.from_json(request.body)
        except (KeyError, TypeError, ValueError) as exc:
            raise HttpError(400, f"bad world: {exc!r}") from None
        if world.job != self.settings.job:
            raise HttpError(409, f"world of job {world.job!r} sent to job {self.settings.job!r}")
        self._events.put(_WorldEvent(world))
        return Response(200, {"accepted": world.generation})

    # --- main loop -----------------------------------------------------------------------------

    def run(self) -> int:
        """Serve, join the world, run processes until a verdict; return the exit code."""
        if self.settings.die_with_parent:
            die_with_parent(signal.SIGTERM)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda signum, _frame: self._events.put(_SignalEvent(signum)))
        self._server.start()
        try:
            if self._coordinator is not None:
                with self._lock:
                    actions = self._coordinator.register(self.node, self._clock())
                self._perform(actions)
            else:
                threading.Thread(target=self._register, name="register", daemon=True).start()
            return self._loop()
        finally:
            if self._procs is not None:
                self._procs.stop(self.settings.grace_period)
            for pusher in self._pushers:
                pusher.join(timeout=5.0)
            self._server.shutdown()
            self._server.server_close()

    def _loop(self) -> int:
        deadline = self._clock() + self.settings.quorum_timeout + WORLD_WAIT_MARGIN
        while True:
            try:
                event = self._events.get(timeout=TICK)
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
            elif self.world is None and self._clock() > deadline:
                waited = self.settings.quorum_timeout + WORLD_WAIT_MARGIN
                self.say(f"no world from the coordinator within {waited:g} s of starting; giving up")
                return contract.EXIT_RENDEZVOUS

    def _handle(self, event: _Event) -> Optional[int]:
        if isinstance(event, _WorldEvent):
            return self._on_world(event.world)
        if isinstance(event, ProcExit):
            self._on_exit(event)
            return None
        if isinstance(event, _ActionsEvent):
            self._perform(event.actions)
            return None
        if isinstance(event, _SignalEvent):
            return self._on_signal(event.signum)
        self.say(event.message)
        return event.exit_code

    def _perform(self, actions: Any) -> None:
        for action in actions:
            if isinstance(action, Say):
                self.say(action.message)
            elif isinstance(action, Push):
                self._push(action)

    def _push(self, push: Push) -> None:
        body = push.world.to_json()
        for node in push.targets:
            if node.node_id == self.settings.node_id:
                self._events.put(_WorldEvent(push.world))
                continue
            thread = threading.Thread(target=self._send_world, args=(node, body), daemon=True)
            thread.start()
            self._pushers.append(thread)

    def _send_world(self, node: Node, body: dict[str, Any]) -> None:
        try:
            request_json(node.addr, node.port, "POST", contract.ROUTE_WORLD, self.settings.token, body)
        except TransportError as exc:
            self.say(f"could not send generation {body['generation']} to node {node.node_id}: {exc}")

    def _in(self, world: World) -> bool:
        return any(n.node_id == self.settings.node_id for n in world.nodes)

    def _on_world(self, world: World) -> Optional[int]:
        current = self.world
        if current is not None and world.generation < current.generation:
            return None
        if current is not None and world.generation == current.generation and current.status in TERMINAL:
            return None
        self.world = world
        if world.status in TERMINAL:
            return self._finish(world)
        if not self._in(world):
            return None
        if self._procs is not None:
            self._procs.stop(self.settings.grace_period)
        self._start(world)
        return None

    def _start(self, world: World) -> None:
        node_rank = world.node_rank_of(self.settings.node_id)
        base = dict(os.environ)
        envs = [{**base, **process_env(world, node_rank, i)} for i in range(self.settings.num_proc)]
        log_dir = os.path.join(self.settings.log_dir, f"gen-{world.generation}") if self.settings.log_dir else None
        self._exits = {}
        self._procs = self._service.workers(world, envs, log_dir) if self._service is not None else LocalProcesses(
            world.generation, world.first_rank(node_rank), envs, self.settings.entrypoint,
            self._events.put, log_dir,
        )
        if world.generation == 1 or world.restart_count:
            self.say(
                f"generation {world.generation}: node rank {node_rank} of {len(world.nodes)}, "
                f"ranks {world.first_rank(node_rank)}..{world.first_rank(node_rank) + self.settings.num_proc - 1} "
                f"of {world.world_size}, master {world.master_addr}:{world.master_port}"
            )
        self._procs.start()

    def _on_exit(self, event: ProcExit) -> None:
        world = self.world
        if world is None or event.generation != world.generation or event.requested or world.status != RUNNING:
            return
        self._exits[event.local_rank] = event
        if event.exit_code != 0:
            failure = Failure(
                rank=event.rank, node_id=self.settings.node_id, local_rank=event.local_rank,
                exit_code=event.exit_code, stderr_tail=event.stderr_tail, timestamp=event.timestamp,
                addr=self.settings.advertise_address,
            )
            self._report(world.generation, FAILED, failure=failure.to_json())
        elif len(self._exits) == self.settings.num_proc and all(e.exit_code == 0 for e in self._exits.values()):
            self._report(world.generation, SUCCEEDED)

    def _report(self, generation: int, state: str, **extra: Any) -> None:
        body = {**self._member_body(), "generation": generation, "state": state, **extra}
        if self._coordinator is not None:
            self._route_put_members(Request("PUT", contract.ROUTE_MEMBERS, body, "local"))
            return
        threading.Thread(target=self._send_report, args=(body,), daemon=True).start()

    def _send_report(self, body: dict[str, Any]) -> None:
        try:
            request_json(
                self._coordinator_addr or self.settings.coordinator, self.settings.coordinator_port,
                "PUT", contract.ROUTE_MEMBERS, self.settings.token, body,
            )
        except TransportError as exc:
            self.say(f"could not report {body['state']} to the coordinator: {exc}")

    def _member_body(self) -> dict[str, Any]:
        return {"node_id": self.node.node_id, "addr": self.node.addr, "port": self.node.port,
                "num_proc": self.node.num_proc}

    def _finish(self, world: World) -> int:
        if self._procs is not None:
            self._procs.stop(self.settings.grace_period)
        if world.status == FAILED and not self.settings.is_coordinator:
            self.say(f"job failed: {world.message.split(';')[0] if world.message else 'see node 0'}")
        elif world.status != SUCCEEDED and not self.settings.is_coordinator:
            self.say(f"job {world.status}: {world.message}")
        return world.exit_code

    def _on_signal(self, signum: int) -> int:
        name = signal.Signals(signum).name
        code = contract.EXIT_INTERRUPTED_BASE + signum
        self.say(f"received {name}: stopping processes")
        if self._procs is not None:
            self._procs.stop(self.settings.grace_period)
        if self._coordinator is not None:
            with self._lock:
                actions = self._coordinator.stop(f"node 0 received {name}", code)
            self._perform(a for a in actions if isinstance(a, Push) and self._others(a))
        elif self.world is not None and self.world.status == RUNNING:
            body = {**self._member_body(), "generation": self.world.generation, "state": "stopped",
                    "message": f"received {name}"}
            self._send_report(body)
        return code

    def _others(self, push: Push) -> bool:
        return any(n.node_id != self.settings.node_id for n in push.targets)

    # --- registration (worker thread) ------------------------------------------------------------

    def _register(self) -> None:
        """Resolve the coordinator and register, retrying with backoff until the quorum timeout."""
        s = self.settings
        deadline = self._clock() + s.quorum_timeout
        try:
            self._coordinator_addr = self._resolver.resolve(s.coordinator, s.quorum_timeout)
        except RendezvousError as exc:
            self._events.put(_FatalEvent(str(exc), contract.EXIT_RENDEZVOUS))
            return
        delay = 0.05
        body = {**self._member_body(), "state": "joining"}
        while True:
            try:
                request_json(self._coordinator_addr, s.coordinator_port, "PUT", contract.ROUTE_MEMBERS, s.token, body)
                return
            except Unauthorized as exc:
                message = f"the coordinator refused this node's token: {exc}"
                self._events.put(_FatalEvent(message, contract.EXIT_RENDEZVOUS))
                return
            except TransportError as exc:
                if exc.status is not None and exc.status != 503:
                    self._events.put(_FatalEvent(f"registration refused: {exc}", contract.EXIT_RENDEZVOUS))
                    return
                if self._clock() + delay > deadline:
                    self._events.put(
                        _FatalEvent(
                            f"coordinator {s.coordinator}:{s.coordinator_port} unreachable for "
                            f"{s.quorum_timeout:g} s: {exc}", contract.EXIT_RENDEZVOUS,
                        )
                    )
                    return
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
