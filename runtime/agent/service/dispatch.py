"""Service-mode calls through one agent: ``POST /call`` (coordinator) and ``POST /exec`` (every node).

A call's journey: the coordinator validates it (``calls.py``), plans flat or tree fan-out
(``membership/tree.py``) and then does what every node does with an ``/exec``: start the call on its own ranks
(``executor.py``), send it to each child (``multiplex.py``: one thread for all children, kept-alive
connections), and merge what comes back into rank order, whatever order it arrives in.

The first failure anywhere ends the call. The node that sees it cancels its own ranks and sends
``{"cancel": id}`` to every child still running (each does the same for its subtree), then answers
its parent with the error, so the error climbs to the coordinator while cancellation spreads down.
A missed deadline ends the call the same way, answered with ``CallTimeout`` naming the ranks that had
not answered. Every hop checks the HTTP status of every answer, hands its children a little less
time than it has (so they answer before it gives up on them), and never resends a call that may have
started. One call runs at a time per job; the next waits for the coordinator (within its own
deadline). Standard library only.
"""

from __future__ import annotations

import collections
import json
import queue
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from runtime.agent import contract
from runtime.agent.errors import (
    CallCancelled,
    CallTimeout,
    HttpError,
    NodeFailed,
    TrainplaneError,
    WorkerMembershipChanged,
)
from runtime.agent.membership.tree import Plan, plan_node, plan_root
from runtime.agent.net.peer import Answer, Batch, Exchange, PeerTransport
from runtime.agent.net.server import Request, Response, Routes
from runtime.agent.net.transport import HttpTransport
from runtime.agent.service.calls import CallRequest, ExecRequest
from runtime.agent.service.executor import LocalCall, LocalExecutor, RankDone, RankFailed
from runtime.agent.service.pool import WorkerPool
from runtime.agent.service.wire import error_body, error_from_body, error_status
from runtime.agent.spec.settings import AgentSettings
from runtime.agent.world import RUNNING, Node, World

HOP_MARGIN_FRACTION = 0.05
"""Share of its remaining time a node keeps back from its children (they answer before it gives up)."""
HOP_MARGIN_MAX = 0.5
"""Most seconds a node keeps back from its children."""
CANCEL_TIMEOUT = 2.0
"""Seconds a node waits for its children to acknowledge a cancel."""
REMEMBERED_CANCELS = 4096
"""Cancels for calls not (yet) seen that a node remembers, so a late exec is refused at once."""
WORLD_POLL_INTERVAL = 0.01
"""Seconds between looks at the world while an exec waits for its generation to arrive."""


@dataclass(frozen=True)
class _Abort:
    """End an in-flight call with ``error`` (a cancel from the parent, or a failure from outside)."""

    error: TrainplaneError


@dataclass(frozen=True)
class _ChildFailed:
    """A child answered with an error, or did not answer."""

    error: TrainplaneError


@dataclass(frozen=True)
class _ChildTimedOut:
    """A child's subtree missed its deadline; these ranks had not answered."""

    pending_ranks: tuple[int, ...]


@dataclass(frozen=True)
class _ChildrenDone:
    """Every child has answered."""


_Event = Union[RankDone, RankFailed, _Abort, _ChildFailed, _ChildTimedOut, _ChildrenDone]


@dataclass(frozen=True)
class Results:
    """A call's results on a subtree (or the whole job): ``values[i]`` is rank ``ranks[i]``'s result."""

    ranks: tuple[int, ...]
    values: tuple[Any, ...]


class _Layout:
    """One world's lookups, computed once: node id to node rank, node rank to global ranks."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.node_rank = {node.node_id: i for i, node in enumerate(world.nodes)}
        self.first: list[int] = []
        total = 0
        for node in world.nodes:
            self.first.append(total)
            total += node.num_proc

    def ranks(self, node_ranks: Sequence[int]) -> list[int]:
        out: list[int] = []
        for n in node_ranks:
            out.extend(range(self.first[n], self.first[n] + self.world.nodes[n].num_proc))
        return out


class ServiceNode:
    """The service-mode half of an agent: its routes, its in-flight calls and its local executor.

    Args:
        settings: the agent's settings (node id, token, tree settings, pickle opt-in, grace period).
        world: returns the agent's current world (``None`` before one formed).
        say: writes one line to the agent's log.
        executor: runs calls on this node's ranks; ``None`` until :meth:`workers` makes one.
        on_unreachable: called with a child node whose connection was refused (membership's probe seam).
        clock: monotonic clock, seconds.
        transport: how this node reaches its children (default: HTTP).
    """

    def __init__(
        self,
        settings: AgentSettings,
        world: Callable[[], Optional[World]],
        say: Callable[[str], None],
        executor: Optional[LocalExecutor] = None,
        on_unreachable: Callable[[Node], None] = lambda _node: None,
        clock: Callable[[], float] = time.monotonic,
        transport: Optional[PeerTransport] = None,
    ) -> None:
        self._settings = settings
        self._world = world
        self._say = say
        self._executor = executor
        self._on_unreachable = on_unreachable
        self._clock = clock
        self._transport: PeerTransport = transport or HttpTransport(settings.token, clock)
        self._lock = threading.Lock()
        self._call_lock = threading.Lock()
        self._inflight: dict[str, queue.SimpleQueue[_Event]] = {}
        self._cancelled: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._layout: Optional[_Layout] = None
        self._counts = {"calls": 0, "execs": 0, "cancels": 0}

    # --- wiring ----------------------------------------------------------------------------------

    def routes(self) -> Routes:
        """The routes this node serves."""
        return {("POST", contract.ROUTE_CALL): self.route_call, ("POST", contract.ROUTE_EXEC): self.route_exec}

    def workers(self, world: World, envs: Sequence[Mapping[str, str]], log_dir: Optional[str]) -> WorkerPool:
        """This node's long-lived worker processes for ``world``, not yet started; they take calls from now on.

        Args:
            world: the generation they belong to.
            envs: one environment per local rank (the contract merged over ``procs.inherited_env``).
            log_dir: directory for ``rank-N.log`` files, or ``None``.
        """
        layout = self._layout_of(world)
        node_rank = layout.node_rank[self._settings.node_id]
        pool = WorkerPool(world.generation, node_rank, layout.first[node_rank], envs, self._say,
                          self._settings.grace_period, log_dir)
        self._executor = pool
        return pool

    def use_executor(self, executor: LocalExecutor) -> None:
        """Run this node's share of calls with ``executor`` from now on (lightweight agents, tests)."""
        self._executor = executor

    def fail_in_flight(self, error: TrainplaneError) -> None:
        """End every call in flight through this node with ``error`` (e.g. WorkerMembershipChanged)."""
        with self._lock:
            queues = list(self._inflight.values())
        for events in queues:
            events.put(_Abort(error))

    def stats(self) -> dict[str, int]:
        """Counters: calls taken (coordinator), execs and cancels received, requests this node has sent."""
        return {**self._counts, "requests_sent": self._transport.sent}

    def close(self) -> None:
        """Close kept-alive connections."""
        self._transport.close()

    # --- routes (handler threads) -------------------------------------------------------------------

    def route_call(self, request: Request) -> Response:
        """``POST /call``: run a call on the job (coordinator only)."""
        world, me = self._running_world()
        if me != 0:
            coordinator = world.nodes[0]
            raise HttpError(409, f"calls go to the coordinator (node rank 0) at {coordinator.addr}:{coordinator.port}")
        call = CallRequest.from_json(request.body, self._settings.allow_pickle)
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
        if not self._call_lock.acquire(timeout=-1 if deadline is None else max(0.0, deadline - self._clock())):
            error = CallTimeout(call.timeout, self._layout_of(world).ranks(targets), call.invocation.fn,
                                "another call held the job for the whole timeout")
            return Response(error_status(error), error_body(error))
        try:
            s = self._settings
            plan = plan_root(targets, me, s.tree_threshold, s.tree_fanout)
            exec_request = ExecRequest(uuid.uuid4().hex, world.generation, call.invocation, call.timeout,
                                       targets, s.tree_fanout)
            outcome = self._execute(world, exec_request, plan, deadline)
        finally:
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
        exec_request = ExecRequest.from_json(request.body, self._settings.allow_pickle)
        self._await_generation(exec_request.generation)
        world, me = self._running_world()
        if exec_request.generation != world.generation:
            raise HttpError(409, f"call planned for generation {exec_request.generation}, this node is at "
                                 f"generation {world.generation}")
        if exec_request.nodes[0] != me:
            raise HttpError(400, f"an exec for node rank {exec_request.nodes[0]} reached node rank {me}")
        if max(exec_request.nodes) >= len(world.nodes):
            raise HttpError(400, f"nodes {list(exec_request.nodes)} outside 0..{len(world.nodes) - 1}")
        deadline = None if exec_request.timeout is None else self._clock() + exec_request.timeout
        self._count("execs")
        outcome = self._execute(world, exec_request, plan_node(exec_request.nodes, exec_request.fanout), deadline)
        if isinstance(outcome, TrainplaneError):
            return Response(error_status(outcome), error_body(outcome))
        return Response(200, {"ranks": list(outcome.ranks), "results": list(outcome.values)})

    def _route_cancel(self, call_id: Any) -> Response:
        if not isinstance(call_id, str) or not call_id:
            raise HttpError(400, "cancel must name a call id")
        self._count("cancels")
        with self._lock:
            events = self._inflight.get(call_id)
            if events is None:
                self._cancelled[call_id] = None
                while len(self._cancelled) > REMEMBERED_CANCELS:
                    self._cancelled.popitem(last=False)
        if events is not None:
            events.put(_Abort(CallCancelled(f"call {call_id} cancelled by its parent")))
        return Response(200, {"cancelled": events is not None})

    def _count(self, name: str) -> None:
        with self._lock:
            self._counts[name] += 1

    def _await_generation(self, generation: int) -> None:
        """Give an in-flight world push up to one heartbeat TTL to land before an exec of ``generation``.

        The coordinator pushes a new world to every node at once, so a parent in the call tree can
        forward an exec to a child that has not installed that world yet.
        """
        deadline = self._clock() + self._settings.heartbeat_ttl
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
        me = self._layout_of(world).node_rank.get(self._settings.node_id)
        if me is None:
            raise HttpError(503, f"node {self._settings.node_id} is not in generation {world.generation}")
        return world, me

    def _layout_of(self, world: World) -> _Layout:
        layout = self._layout
        if layout is None or layout.world is not world:
            layout = self._layout = _Layout(world)
        return layout

    def _membership_view(self, world: World, error: TrainplaneError) -> TrainplaneError:
        current = self._world()
        if isinstance(error, WorkerMembershipChanged) or current is None or current.generation == world.generation:
            return error
        return WorkerMembershipChanged.between([n.addr for n in world.nodes], [n.addr for n in current.nodes],
                                               current.generation)

    # --- one call through this node ------------------------------------------------------------------

    def _execute(self, world: World, request: ExecRequest, plan: Plan,
                 deadline: Optional[float]) -> Union[Results, TrainplaneError]:
        events: queue.SimpleQueue[_Event] = queue.SimpleQueue()
        with self._lock:
            if request.call_id in self._cancelled:
                del self._cancelled[request.call_id]
                return CallCancelled(f"call {request.call_id} was cancelled before it reached this node")
            self._inflight[request.call_id] = events
        try:
            return _Execution(self, world, request, plan, deadline, events).run()
        finally:
            with self._lock:
                self._inflight.pop(request.call_id, None)

    def _child_timeout(self, deadline: Optional[float]) -> Optional[float]:
        if deadline is None:
            return None
        remaining = deadline - self._clock()
        return max(0.001, remaining - min(HOP_MARGIN_MAX, remaining * HOP_MARGIN_FRACTION))

    def _send_cancels(self, nodes: Sequence[Node], call_id: str) -> None:
        if not nodes:
            return
        body = json.dumps({"cancel": call_id}).encode()
        exchanges = [Exchange(n.addr, n.port, "POST", contract.ROUTE_EXEC, body) for n in nodes]

        def check(answer: Answer) -> None:
            if not answer.ok:
                node = nodes[answer.index]
                self._say(f"cancel of call {call_id} not acknowledged by node {node.node_id} at {node.addr}:"
                          f"{node.port}: {answer.problem}")

        self._transport.batch(exchanges, self._clock() + CANCEL_TIMEOUT).run(check)


def batch_mode_routes() -> Routes:
    """``/call`` and ``/exec`` for a batch-mode agent: 409, naming the setting that enables them."""

    def refuse(_request: Request) -> Response:
        raise HttpError(409, f"this job runs in batch mode; start it with {contract.MODE}=service to take calls")

    return {("POST", contract.ROUTE_CALL): refuse, ("POST", contract.ROUTE_EXEC): refuse}


class _Execution:
    """One call's run through one node: start local ranks and children, merge, cancel on failure.

    Children's successful answers are merged by the fan-out thread as they arrive; the waiting
    handler thread is woken only for what changes the outcome (a failure, a timeout report, the last
    child answering), so a node with many children does not pay a thread hand-off per child.
    """

    def __init__(self, node: ServiceNode, world: World, request: ExecRequest, plan: Plan,
                 deadline: Optional[float], events: queue.SimpleQueue[_Event]) -> None:
        self._node = node
        self._world = world
        self._request = request
        self._plan = plan
        self._deadline = deadline
        self._events = events
        layout = node._layout_of(world)
        self._me = layout.node_rank[node._settings.node_id]
        self._local_ranks = layout.ranks([self._me]) if plan.local else []
        self._children = [world.nodes[sub[0]] for sub in plan.subtrees]
        self._child_ranks = [layout.ranks(sub) for sub in plan.subtrees]
        self._merge_lock = threading.Lock()
        self._child_values: dict[int, Any] = {}
        self._answered: set[int] = set()

    def run(self) -> Union[Results, TrainplaneError]:
        node, request = self._node, self._request
        batch = self._start_children()
        executor = node._executor
        if self._local_ranks:
            if executor is None:
                return NodeFailed(self._me, node._settings.advertise_address, "this node has no worker processes yet")
            executor.submit(LocalCall(request.call_id, request.invocation, self._events.put))
        values: dict[int, Any] = {}
        pending_local = set(self._local_ranks)
        children_open = bool(self._children)
        reported: set[int] = set()
        error: Optional[TrainplaneError] = None
        while (pending_local or children_open) and error is None:
            event = self._next_event()
            if event is None:
                break
            if isinstance(event, RankDone):
                if event.rank in pending_local:
                    pending_local.discard(event.rank)
                    values[event.rank] = event.value
            elif isinstance(event, (RankFailed, _Abort, _ChildFailed)):
                error = event.error
            elif isinstance(event, _ChildTimedOut):
                reported.update(event.pending_ranks)
            else:
                children_open = False
        with self._merge_lock:
            values.update(self._child_values)
            unanswered = [i for i in range(len(self._children)) if i not in self._answered]
            self._answered.update(range(len(self._children)))
        if error is None and not (pending_local or unanswered or reported):
            ranks = tuple(sorted(values))
            return Results(ranks, tuple(values[r] for r in ranks))
        if pending_local and executor is not None:
            executor.cancel(request.call_id)
        if batch is not None:
            batch.abort()
        node._send_cancels([self._children[i] for i in unanswered], request.call_id)
        if error is not None:
            return error
        pending = pending_local | reported
        for i in unanswered:
            pending.update(self._child_ranks[i])
        return CallTimeout(request.timeout, pending, request.invocation.fn)

    def _next_event(self) -> Optional[_Event]:
        if self._deadline is None:
            return self._events.get()
        remaining = self._deadline - self._node._clock()
        if remaining <= 0:
            return None
        try:
            return self._events.get(timeout=remaining)
        except queue.Empty:
            return None

    def _start_children(self) -> Optional[Batch]:
        if not self._children:
            return None
        node, request = self._node, self._request
        head = json.dumps({"call_id": request.call_id, "generation": request.generation,
                           "invocation": request.invocation.to_json(), "timeout": node._child_timeout(self._deadline),
                           "fanout": request.fanout})
        exchanges = [
            Exchange(child.addr, child.port, "POST", contract.ROUTE_EXEC,
                     f'{head[:-1]}, "nodes": {json.dumps(list(subtree))}}}'.encode())
            for child, subtree in zip(self._children, self._plan.subtrees)
        ]
        batch = node._transport.batch(exchanges, self._deadline)
        threading.Thread(target=batch.run, args=(self._on_answer,), name="fanout", daemon=True).start()
        return batch

    def _on_answer(self, answer: Answer) -> None:
        """Fan-out thread: merge a successful answer; wake the handler for anything else, or the last one.

        A child still out at the deadline stays unanswered: the handler reports its ranks as pending.
        """
        if answer.timed_out:
            return
        outcome = self._read_child(answer)
        with self._merge_lock:
            if answer.index in self._answered:
                return
            self._answered.add(answer.index)
            if isinstance(outcome, dict):
                self._child_values.update(outcome)
            last = len(self._answered) == len(self._children)
        if isinstance(outcome, CallTimeout):
            self._events.put(_ChildTimedOut(outcome.pending_ranks))
        elif isinstance(outcome, TrainplaneError):
            self._events.put(_ChildFailed(outcome))
        if last:
            self._events.put(_ChildrenDone())

    def _read_child(self, answer: Answer) -> Union[dict[int, Any], TrainplaneError]:
        child = self._children[answer.index]
        node_rank = self._plan.subtrees[answer.index][0]
        address = f"{child.addr}:{child.port}"
        if answer.status is None:
            if answer.refused:
                self._node._on_unreachable(child)
            return NodeFailed(node_rank, address, answer.error)
        if not answer.ok:
            return error_from_body(answer.body) or NodeFailed(node_rank, address, answer.problem, answer.status)
        ranks, results = answer.body.get("ranks"), answer.body.get("results")
        expected = self._child_ranks[answer.index]
        if ranks != expected or not isinstance(results, list) or len(results) != len(expected):
            return NodeFailed(node_rank, address, f"answered 200 without the results of ranks {expected[0]}.."
                                                  f"{expected[-1]}", answer.status)
        return dict(zip(expected, results))
