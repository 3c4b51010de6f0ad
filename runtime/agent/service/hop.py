"""One call's hop through one node: start it on the node's ranks and children, merge, cancel on failure.

The first failure anywhere ends the call. The node that sees it cancels its own ranks and sends
``{"cancel": id}`` to every child still running (each does the same for its subtree), then answers
its parent with the error, so the error climbs to the coordinator while cancellation spreads down.
A missed deadline ends the call the same way, answered with ``CallTimeout`` naming the ranks that had
not answered. Every hop checks every answer (``peer.Answer``), hands its children a little less time
than it has (so they answer before it gives up on them), and never resends a call that may have
started. Standard library only.
"""

from __future__ import annotations

import json
import queue
import threading
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Union

from runtime.agent import contract
from runtime.agent.errors import CallTimeout, NodeFailed, TrainplaneError
from runtime.agent.membership.tree import Plan
from runtime.agent.net.peer import Answer, Batch, Exchange, PeerTransport
from runtime.agent.service.calls import ExecRequest
from runtime.agent.service.executor import LocalCall, LocalExecutor, RankDone, RankFailed
from runtime.agent.service.silence import SilenceReport
from runtime.agent.service.wire import error_from_body
from runtime.agent.world import Node, World

HOP_MARGIN_FRACTION = 0.05
"""Share of its remaining time a node keeps back from its children (they answer before it gives up)."""
HOP_MARGIN_MAX = 0.5
"""Most seconds a node keeps back from its children."""
CANCEL_TIMEOUT = 2.0
"""Seconds a node waits for its children to acknowledge a cancel."""


@dataclass(frozen=True)
class Abort:
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


Event = Union[RankDone, RankFailed, Abort, _ChildFailed, _ChildTimedOut, _ChildrenDone]
"""What wakes a hop's handler thread."""


@dataclass(frozen=True)
class Results:
    """A call's results on a subtree (or the whole job): ``values[i]`` is rank ``ranks[i]``'s result."""

    ranks: tuple[int, ...]
    values: tuple[Any, ...]


@dataclass(frozen=True)
class Links:
    """What a hop needs of its node besides the call.

    Attributes:
        transport: how it reaches its children.
        clock: monotonic clock, seconds.
        address: the node's ``host`` (for failure reports).
        say: writes one line to the agent's log.
        on_unreachable: called with a child whose connection was refused (membership's probe seam).
    """

    transport: PeerTransport
    clock: Callable[[], float]
    address: str
    say: Callable[[str], None]
    on_unreachable: Callable[[Node], None]

    def child_timeout(self, deadline: Optional[float]) -> Optional[float]:
        """Seconds a child gets: what is left before ``deadline``, less a margin; ``None`` without one."""
        if deadline is None:
            return None
        remaining = deadline - self.clock()
        return max(0.001, remaining - min(HOP_MARGIN_MAX, remaining * HOP_MARGIN_FRACTION))

    def send_cancels(self, nodes: Sequence[Node], call_id: str) -> None:
        """Cancel ``call_id`` on ``nodes`` (each cancels its subtree); say which did not acknowledge."""
        if not nodes:
            return
        body = json.dumps({"cancel": call_id}).encode()
        exchanges = [Exchange(n.addr, n.port, "POST", contract.ROUTE_EXEC, body) for n in nodes]

        def check(answer: Answer) -> None:
            if not answer.ok:
                node = nodes[answer.index]
                self.say(f"cancel of call {call_id} not acknowledged by node {node.node_id} at {node.addr}:"
                         f"{node.port}: {answer.problem}")

        self.transport.batch(exchanges, self.clock() + CANCEL_TIMEOUT).run(check)


class Hop:
    """One call's run through one node.

    Children's successful answers are merged by the fan-out thread as they arrive; the waiting
    handler thread is woken only for what changes the outcome (a failure, a timeout report, the last
    child answering), so a node with many children does not pay a thread hand-off per child.

    Args:
        world: the world the call was planned against.
        me: this node's rank in it.
        request: the call, as this node received it.
        plan: this node's part: run locally or not, and its children's subtrees.
        deadline: monotonic time the call must end by, or ``None``.
        events: where the node's routes post :class:`Abort` (cancels, failures from outside).
        executor: runs the call on this node's ranks (``None``: no worker processes yet).
        links: the node's transport, clock, address and log.
        output: where this node's ranks' output during the call goes (``LocalCall.output``), or ``None``.
        code: the synced tree this node's ranks import from (``LocalCall.code``), or ``""``.
        report_after: seconds after the first answer at which the ranks still out are named to the
            caller (``output``) and the log, again each period (``hang_report_after``; the
            coordinator's hop only); ``None``: no report.
    """

    def __init__(self, world: World, me: int, request: ExecRequest, plan: Plan, deadline: Optional[float],
                 events: queue.SimpleQueue[Event], executor: Optional[LocalExecutor], links: Links,
                 output: Optional[Callable[[int, str, str], None]] = None, code: str = "",
                 report_after: Optional[float] = None) -> None:
        self._output = output
        self._code = code
        self._request = request
        self._plan = plan
        self._deadline = deadline
        self._events = events
        self._executor = executor
        self._links = links
        self._me = me
        self._local_ranks = world.ranks_of([me]) if plan.local else []
        self._children = [world.nodes[sub[0]] for sub in plan.subtrees]
        self._child_ranks = [world.ranks_of(sub) for sub in plan.subtrees]
        self._merge_lock = threading.Lock()
        self._child_values: dict[int, Any] = {}
        self._answered: set[int] = set()
        self._ranks = [*self._local_ranks, *(r for sub in self._child_ranks for r in sub)]
        self._silence = SilenceReport(request.invocation.fn, self._ranks, report_after) if report_after else None
        self._local_values: dict[int, Any] = {}

    def run(self) -> Union[Results, TrainplaneError]:
        """Run the call here and below; the merged results in rank order, or the error that ended it."""
        request, executor = self._request, self._executor
        batch = self._start_children()
        if self._local_ranks:
            if executor is None:
                return NodeFailed(self._me, self._links.address, "this node has no worker processes yet")
            executor.submit(LocalCall(request.call_id, request.invocation, self._events.put, self._output, self._code))
        values, pending_local, reported, error = self._collect()
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
        self._links.send_cancels([self._children[i] for i in unanswered], request.call_id)
        if error is not None:
            return error
        pending = pending_local | reported
        for i in unanswered:
            pending.update(self._child_ranks[i])
        return CallTimeout(request.timeout, sorted(pending), request.invocation.fn)

    def _collect(self) -> tuple[dict[int, Any], set[int], set[int], Optional[TrainplaneError]]:
        """Wait for this node's ranks and children: ``(local results, local ranks still out, ranks
        children reported still out, the error that ended the call or None)``."""
        values: dict[int, Any] = {}
        pending_local = set(self._local_ranks)
        children_open = bool(self._children)
        reported: set[int] = set()
        while pending_local or children_open:
            event = self._next_event()
            if event is None:
                break
            if isinstance(event, RankDone):
                if event.rank in pending_local:
                    pending_local.discard(event.rank)
                    values[event.rank] = event.value
                    with self._merge_lock:
                        self._local_values[event.rank] = event.value
                        if self._silence is not None:
                            self._silence.answered(self._links.clock())
            elif isinstance(event, (RankFailed, Abort, _ChildFailed)):
                return values, pending_local, reported, event.error
            elif isinstance(event, _ChildTimedOut):
                reported.update(event.pending_ranks)
            else:
                children_open = False
        return values, pending_local, reported, None

    def _next_event(self) -> Optional[Event]:
        """The next event; ``None`` at the deadline. Reports silent ranks while waiting (``report_after``)."""
        while True:
            now = self._links.clock()
            wait = None if self._deadline is None else self._deadline - now
            if wait is not None and wait <= 0:
                return None
            if self._silence is not None:
                tick = self._silence.wait(now)
                wait = tick if wait is None else min(wait, tick)
            try:
                return self._events.get() if wait is None else self._events.get(timeout=wait)
            except queue.Empty:
                self._report_silence()

    def _report_silence(self) -> None:
        if self._silence is None:
            return
        with self._merge_lock:
            answered = [*self._local_values, *self._child_values]
        message = self._silence.report(answered, self._links.clock())
        if message is None:
            return
        self._links.say(message)
        if self._output is not None:
            waiting = min(set(self._ranks) - set(answered), default=0)
            self._output(waiting, "stderr", message + "\n")

    def _start_children(self) -> Optional[Batch]:
        if not self._children:
            return None
        bodies = self._request.bodies(self._plan.subtrees, self._links.child_timeout(self._deadline))
        exchanges = [Exchange(child.addr, child.port, "POST", contract.ROUTE_EXEC, body)
                     for child, body in zip(self._children, bodies)]
        batch = self._links.transport.batch(exchanges, self._deadline)
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
                if self._silence is not None:
                    self._silence.answered(self._links.clock())
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
                self._links.on_unreachable(child)
            return NodeFailed(node_rank, address, answer.error)
        if not answer.ok:
            return error_from_body(answer.body) or NodeFailed(node_rank, address, answer.problem, answer.status)
        ranks, results = answer.body.get("ranks"), answer.body.get("results")
        expected = self._child_ranks[answer.index]
        if ranks != expected or not isinstance(results, list) or len(results) != len(expected):
            return NodeFailed(node_rank, address, f"answered 200 without the results of ranks {expected[0]}.."
                                                  f"{expected[-1]}", answer.status)
        return dict(zip(expected, results))
