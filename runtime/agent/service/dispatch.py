"""Service-mode calls through one agent: ``POST /call`` (coordinator) and ``POST /exec`` (every node).

A call's journey: the coordinator validates it (``calls.py``), plans flat or tree fan-out (``rendezvous/tree.py``)
and then does what every node does with an ``/exec``: one :class:`hop.Hop` starts the call on its own ranks (the
executor it was given), sends it to each child (kept-alive connections), and merges what comes back into rank order,
whatever order it arrives in. Given the server's event loop (:meth:`ServiceNode.use_loop`), an ``/exec`` runs on it
from request to answer, its children's requests too, so a hop takes no thread; one that must wait first (for its
world, a code tree, an output forwarder) runs in the server's pool. One call runs at a time per job; the next waits
for the coordinator (within its own deadline). Standard library only."""

from __future__ import annotations

import collections
import os
import queue
import tempfile
import threading
import time
import uuid
from typing import Any, Callable, Optional

from runtime.agent import contract
from runtime.agent.code.fanout import CodeFanout
from runtime.agent.code.store import CodeStore
from runtime.agent.errors import (
    CallCancelled,
    CallTimeout,
    HttpError,
    JobEnded,
    NodeFailed,
    TrainplaneError,
    WorkerMembershipChanged,
)
from runtime.agent.net.loop import EventLoop
from runtime.agent.net.multiplex import LOOP_CHECK
from runtime.agent.net.peer import PeerTransport
from runtime.agent.net.server import Deferred, Request, Response, RouteKey, Routes
from runtime.agent.net.transport import HttpTransport
from runtime.agent.rendezvous.tree import Plan, plan_node, plan_root
from runtime.agent.service.calls import CallRequest, ExecRequest
from runtime.agent.service.drivers import Driver, LoopDriver, ThreadDriver
from runtime.agent.service.executor import LocalExecutor
from runtime.agent.service.hop import Abort, Event, Hop, Links, Outcome, by_address, exec_response
from runtime.agent.service.output_relay import CallOutputs, OutputForwarder, sink
from runtime.agent.spec.agent_settings import AgentSettings
from runtime.agent.spec.status import RUNNING, TERMINAL
from runtime.agent.spec.wire import error_body, error_status
from runtime.agent.world import Node, World

REMEMBERED_CANCELS = 4096
"""Cancels for calls not (yet) seen that a node remembers, so a late exec is refused at once."""
HANGUP_POLL = 0.5
"""Seconds between looks, while a call waits for the job's call slot, at whether its caller is still
there (a running call is told of a hang-up at once, ``Request.on_hang_up``)."""
CALLER_GONE = CallCancelled("the caller hung up (interrupted, killed, or its connection cut): the call was "
                            "cancelled on every rank")
"""What ends a call whose caller (the client, or the parent node of an exec) has gone."""
WORLD_POLL_INTERVAL = 0.01
"""Seconds between looks at the world while an exec waits for its generation to arrive."""


class ServiceNode:
    """The service-mode half of an agent: its routes, its in-flight calls and the executor that runs
    its share of them (given by whoever starts the node's processes, :meth:`use_executor`).

    Args:
        settings: the agent's settings (node id, token, tree settings, pickle opt-in, heartbeat TTL).
        world: returns the agent's current world (``None`` before one formed).
        say: writes one line to the agent's log.
        on_unreachable: called with a child node whose connection was refused (membership's probe seam).
        clock: monotonic clock, seconds.
        transport: how this node reaches its children (default: HTTP).
    """

    def __init__(
        self,
        settings: AgentSettings, *,
        world: Callable[[], Optional[World]], say: Callable[[str], None],
        on_unreachable: Callable[[Node], None] = lambda _node: None,
        clock: Callable[[], float] = time.monotonic,
        transport: Optional[PeerTransport] = None,
    ) -> None:
        self._settings = settings
        self._world = world
        self._clock = clock
        self._transport: PeerTransport = transport or HttpTransport(settings.token, clock, job=settings.job)
        self._links = Links(self._transport, clock, settings.node.advertise_address, say, on_unreachable)
        self._executor: Optional[LocalExecutor] = None
        self._lock = threading.Lock()
        self._call_lock = threading.Lock()
        self._inflight: dict[str, Callable[[Event], None]] = {}
        self._loop: Optional[EventLoop] = None
        self._cancelled: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._counts = {"calls": 0, "execs": 0, "cancels": 0, "trees": 0}
        self._say = say
        self._outputs = CallOutputs()
        store_dir = os.path.join(settings.plumbing.run_root or tempfile.gettempdir(),
                                 f"trainplane-code-{settings.spec.job_name}-{settings.node.node_id}-{uuid.uuid4().hex[:8]}")
        self._code = CodeFanout(settings, world=world, store=CodeStore(store_dir), transport=self._transport,
                                clock=clock)

    # --- wiring ----------------------------------------------------------------------------------

    def routes(self) -> Routes:
        """The routes this node serves."""
        return {("POST", contract.ROUTE_CALL): self.route_call, ("POST", contract.ROUTE_EXEC): self.route_exec,
                ("POST", contract.ROUTE_OUTPUT): self.route_output,
                ("POST", contract.ROUTE_CODE): self.route_code}

    def deferred(self) -> dict[RouteKey, Deferred]:
        """The routes the server tries on its loop first (``server.Deferred``): ``/exec``."""
        return {("POST", contract.ROUTE_EXEC): self.defer_exec}

    def use_loop(self, loop: EventLoop) -> None:
        """Run hops on ``loop``, the server's, and every other exchange's I/O there too (with the default
        HTTP transport; another one keeps running hops in the waiting thread)."""
        self._loop = loop if isinstance(self._transport, HttpTransport) else None
        if isinstance(self._transport, HttpTransport):
            self._transport.use_loop(loop)

    def use_executor(self, executor: Optional[LocalExecutor]) -> None:
        """Run this node's share of calls with ``executor`` from now on (``None``: no processes)."""
        self._executor = executor

    def fail_in_flight(self, error: TrainplaneError) -> None:
        """End every call in flight through this node with ``error`` (e.g. WorkerMembershipChanged)."""
        with self._lock:
            posts = list(self._inflight.values())
        for post in posts:
            post(Abort(error))

    @property
    def in_flight(self) -> int:
        """Calls running through this node now."""
        with self._lock:
            return len(self._inflight)

    def stats(self) -> dict[str, int]:
        """Counters: calls taken (coordinator), execs, cancels and trees received, requests this node has sent."""
        with self._lock:
            return {**self._counts, "requests_sent": self._transport.sent}

    def close(self) -> None:
        """Close kept-alive connections; remove the node's synced trees."""
        self._transport.close()
        self._code.store.remove()

    # --- routes (handler threads) -------------------------------------------------------------------

    def route_call(self, request: Request) -> Response:
        """``POST /call``: run a call on the job (coordinator only); once the job has ended, 410 with
        why (``JobEnded``)."""
        ended = self._world()
        if ended is not None and ended.status in TERMINAL:
            why = JobEnded(ended.status, ended.message, ended.exit_code)
            return Response(error_status(why), error_body(why))
        world, me = self._running_world()
        if me != 0:
            coordinator = world.nodes[0]
            raise HttpError(409, f"calls go to the coordinator (node rank 0) at {coordinator.addr}:{coordinator.port}")
        call = CallRequest.from_json(request.body, self._settings.spec.allow_pickle)
        if call.code and self._code.store.tree(call.code) is None:
            return Response(409, {"error": f"this job does not hold tree {call.code}: send it (POST "
                                           f"{contract.ROUTE_CODE}), then call again", "code_missing": call.code})
        serving = tuple(i for i, node in enumerate(world.nodes) if node.num_proc)
        targets = call.workers if call.workers is not None else serving
        if targets[-1] >= len(world.nodes):
            raise HttpError(400, f"workers={list(targets)} is invalid: node ranks go from 0 to {len(world.nodes) - 1}")
        idle = sorted(set(targets) - set(serving))
        if idle:
            raise HttpError(400, f"workers={list(targets)} is invalid: node rank(s) {idle} run no processes (a "
                                 f"{world.distribution} job runs calls on node 0 only); leave workers unset or use [0]")
        deadline = None if call.timeout is None else self._clock() + call.timeout
        self._count("calls")
        waited = self._take_call_slot(deadline, request.hung_up)
        if waited is not None:
            refusal: TrainplaneError = CallTimeout(call.timeout, world.ranks_of(targets), call.invocation.fn,
                                                   "another call held the job for the whole timeout") \
                if waited else CALLER_GONE
            return Response(error_status(refusal), error_body(refusal))
        try:
            s = self._settings
            plan = plan_root(targets, me, threshold=s.spec.tree_threshold, width=s.spec.tree_fanout)
            exec_request = ExecRequest(call_id=uuid.uuid4().hex, generation=world.generation, nodes=targets,
                                       invocation=call.invocation, timeout=call.timeout, fanout=s.spec.tree_fanout,
                                       output=call.output, code=call.code)
            if call.output:
                self._outputs.open(call.output)
            outcome = self._execute(world, me, exec_request, plan, deadline, request.on_hang_up)
        finally:
            if call.output:
                self._outputs.close(call.output)
            self._call_lock.release()
        if isinstance(outcome, TrainplaneError):
            error = self._membership_view(world, outcome)
            return Response(error_status(error), error_body(error))
        return Response(200, {"ranks": list(outcome.ranks), "results": list(outcome.values),
                              "serialization": call.invocation.serialization, "generation": world.generation})

    def route_exec(self, request: Request) -> Response:
        """``POST /exec``: run a call on this node and its subtree, or cancel one."""
        if "cancel" in request.body:
            return self._route_cancel(request.body["cancel"])
        exec_request = ExecRequest.from_json(request.body, self._settings.spec.allow_pickle)
        self._await_generation(exec_request.generation)
        world, me, plan = self._exec_plan(exec_request)
        deadline = None if exec_request.timeout is None else self._clock() + exec_request.timeout
        self._count("execs")
        return exec_response(self._execute(world, me, exec_request, plan, deadline, request.on_hang_up))

    def defer_exec(self, request: Request, respond: Callable[[Response], None]) -> bool:
        """``POST /exec`` on the server's loop (``server.Deferred``): a cancel, or a call whose world is
        here and which needs no code tree nor output forwarder, to children at IP addresses (a name
        lookup would block the loop); ``False`` for the rest (:meth:`route_exec` serves them in the pool)."""
        loop = self._loop
        if loop is None:
            return False
        if "cancel" in request.body:
            respond(self._route_cancel(request.body["cancel"]))
            return True
        exec_request = ExecRequest.from_json(request.body, self._settings.spec.allow_pickle)
        world = self._world()
        if world is None or world.generation < exec_request.generation or exec_request.code or exec_request.output:
            return False
        world, me, plan = self._exec_plan(exec_request)
        if not by_address(world, plan):
            return False
        deadline = None if exec_request.timeout is None else self._clock() + exec_request.timeout
        self._count("execs")
        self._begin(world, me, exec_request, plan, deadline, request.on_hang_up, LoopDriver(loop, self._clock),
                    lambda outcome: respond(exec_response(outcome)))
        return True

    def route_code(self, request: Request) -> Response:
        """``POST /code``: a synced tree to hold and send on, or one to hand out (``runtime.agent.code.fanout``)."""
        if "fetch" not in request.body:
            self._count("trees")
        return Response(200, self._code.route(request.body))

    def route_output(self, request: Request) -> Response:
        """``POST /output``: a node's share of a call's output, or the caller reading it (coordinator)."""
        world = self._world()
        if world is not None and world.has(self._settings.node.node_id) and world.node_rank_of(
                self._settings.node.node_id) != 0:
            raise HttpError(409, "call output is kept by the coordinator (node rank 0)")
        return Response(200, self._outputs.route(request.body))

    def _route_cancel(self, call_id: Any) -> Response:
        if not isinstance(call_id, str) or not call_id:
            raise HttpError(400, "cancel must name a call id")
        self._count("cancels")
        with self._lock:
            post = self._inflight.get(call_id)
            if post is None:
                self._cancelled[call_id] = None
                while len(self._cancelled) > REMEMBERED_CANCELS:
                    self._cancelled.popitem(last=False)
        if post is not None:
            post(Abort(CallCancelled(f"call {call_id} cancelled by its parent")))
        return Response(200, {"cancelled": post is not None})

    def _take_call_slot(self, deadline: Optional[float], hung_up: Optional[Callable[[float], bool]]) -> Optional[bool]:
        """Wait for the job's one call slot (the next call waits for the one running).

        Returns:
            ``None`` once it is held; ``True`` when ``deadline`` passed first, ``False`` when the caller
            hung up first (its call is dropped before it runs).
        """
        while True:
            wait = HANGUP_POLL if deadline is None else min(HANGUP_POLL, max(0.0, deadline - self._clock()))
            if self._call_lock.acquire(timeout=wait):
                return None
            if deadline is not None and self._clock() >= deadline:
                return True
            if hung_up is not None and hung_up(0.0):
                return False

    def _count(self, name: str) -> None:
        with self._lock:
            self._counts[name] += 1

    def _exec_plan(self, exec_request: ExecRequest) -> tuple[World, int, Plan]:
        """The world an exec runs in, this node's rank and its part of the call.

        Raises:
            HttpError: 503 without a running world, 409 for another generation, 400 for an exec meant
                for another node or naming nodes outside the world.
        """
        world, me = self._running_world()
        if exec_request.generation != world.generation:
            raise HttpError(409, f"call planned for generation {exec_request.generation}, this node is at "
                                 f"generation {world.generation}")
        if exec_request.nodes[0] != me:
            raise HttpError(400, f"an exec for node rank {exec_request.nodes[0]} reached node rank {me}")
        if max(exec_request.nodes) >= len(world.nodes):
            raise HttpError(400, f"nodes {list(exec_request.nodes)} outside 0..{len(world.nodes) - 1}")
        return world, me, plan_node(exec_request.nodes, exec_request.fanout)

    def _await_generation(self, generation: int) -> None:
        """Give an in-flight world push up to one heartbeat TTL to land before an exec of ``generation``.

        The coordinator pushes a new world to every node at once, so a parent in the call tree can
        forward an exec to a child that has not installed that world yet.
        """
        deadline = self._clock() + self._settings.spec.heartbeat_ttl
        while True:
            world = self._world()
            if (world is not None and world.generation >= generation) or self._clock() >= deadline:
                return
            time.sleep(WORLD_POLL_INTERVAL)

    def _running_world(self) -> tuple[World, int]:
        """The running world and this node's rank in it.

        Raises:
            HttpError: 503 when there is no running world with this node in it.
        """
        world = self._world()
        if world is None or world.status != RUNNING:
            raise HttpError(503, "the job has no running world yet (still forming, or finished); retry shortly")
        if not world.has(self._settings.node.node_id):
            raise HttpError(503, f"node {self._settings.node.node_id} is not in generation {world.generation}")
        return world, world.node_rank_of(self._settings.node.node_id)

    def _membership_view(self, world: World, error: TrainplaneError) -> TrainplaneError:
        current = self._world()
        if isinstance(error, WorkerMembershipChanged) or current is None or current.generation == world.generation:
            return error
        return WorkerMembershipChanged.between([n.addr for n in world.nodes], [n.addr for n in current.nodes],
                                               current.generation)

    def _execute(self, world: World, me: int, request: ExecRequest, plan: Plan, deadline: Optional[float],
                 on_hang_up: Optional[Callable[[Callable[[], None]], None]] = None) -> Outcome:
        """Run ``request`` through this node and wait for its outcome (a pool thread): its hop on the
        server's loop when there is one, else in this thread; with its code tree and, on a node that is
        not the coordinator, the forwarder of its output (closed before this node answers)."""
        try:
            code = self._code.tree_for(request.code, world) if request.code and plan.local else ""
        except HttpError as exc:
            return NodeFailed(me, self._settings.node.advertise_address, str(exc))
        forwarder = None
        if request.output and me != 0 and plan.local:
            head = world.nodes[0]
            forwarder = OutputForwarder(request.output, (head.addr, head.port), self._transport, self._say)
        outcome: queue.SimpleQueue[Outcome] = queue.SimpleQueue()
        output = sink(self._outputs if me == 0 else None, forwarder, request.output)
        try:
            loop = self._loop
            if loop is not None and by_address(world, plan):
                stopped = NodeFailed(me, self._settings.node.advertise_address, "this node's agent is stopping")
                loop.call_soon(lambda: outcome.put(stopped) if not loop.serving() else self._begin(
                    world, me, request, plan, deadline, on_hang_up, LoopDriver(loop, self._clock), outcome.put, output,
                    code))
                return _awaited(outcome, loop, stopped)
            driver = ThreadDriver(self._clock)
            self._begin(world, me, request, plan, deadline, on_hang_up, driver, outcome.put, output, code)
            driver.run_until(lambda: not outcome.empty())
            return outcome.get()
        finally:
            if forwarder is not None:
                forwarder.close()  # before this node answers: the caller reads it before the call's end

    def _begin(self, world: World, me: int, request: ExecRequest, plan: Plan, deadline: Optional[float],
               on_hang_up: Optional[Callable[[Callable[[], None]], None]], driver: Driver,
               on_done: Callable[[Outcome], None], output: Optional[Callable[[int, str, str], None]] = None,
               code: str = "") -> None:
        """Start ``request``'s :class:`Hop` through this node as a step of ``driver``; ``on_done`` gets its
        outcome. A caller that hangs up meanwhile (the server tells ``on_hang_up``'s watcher) cancels it
        everywhere, as a missed deadline does; so does a cancel that arrived first."""
        def done(outcome: Outcome) -> None:
            with self._lock:
                self._inflight.pop(request.call_id, None)
            on_done(outcome)

        report_after = self._settings.spec.hang_report_after if me == 0 else None
        hop = Hop(world, me=me, request=request, plan=plan, deadline=deadline, driver=driver, on_done=done,
                  executor=self._executor, links=self._links, output=output, code=code, report_after=report_after)
        with self._lock:
            cancelled = request.call_id in self._cancelled
            if cancelled:
                del self._cancelled[request.call_id]
            else:
                self._inflight[request.call_id] = lambda event: driver.post(lambda: hop.feed(event))
        if cancelled:
            on_done(CallCancelled(f"call {request.call_id} was cancelled before it reached this node"))
            return
        if on_hang_up is not None:
            on_hang_up(lambda: driver.post(lambda: hop.feed(Abort(CALLER_GONE))))
        hop.start()


def _awaited(outcome: queue.SimpleQueue[Outcome], loop: EventLoop, stopped: Outcome) -> Outcome:
    """The outcome of a hop run on ``loop``; ``stopped`` once the loop has ended without one (nothing more runs
    there: the hop's answers and timers with it)."""
    while True:
        try:
            return outcome.get(timeout=LOOP_CHECK)
        except queue.Empty:
            if loop.closed():
                return outcome.get_nowait() if not outcome.empty() else stopped
