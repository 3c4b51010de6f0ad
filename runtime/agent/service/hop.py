"""One call's hop through one node: start it on the node's ranks and children, merge, cancel on failure.

The first failure anywhere ends the call. The node that sees it cancels its own ranks and sends
``{"cancel": id}`` to every child still running (each does the same for its subtree), then answers
its parent with the error, so the error climbs to the coordinator while cancellation spreads down.
A missed deadline ends the call the same way, answered with ``CallTimeout`` naming the ranks that had
not answered. Every hop checks every answer (``peer.Answer``), hands its children a little less time
than it has (so they answer before it gives up on them), and never resends a call that may have
started. A hop is a state machine whose steps a ``drivers.Driver`` runs one at a time (on the agent's
event loop, or in a waiting thread), so it needs no lock and, on the loop, no thread. Standard
library only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Union

from runtime.agent import contract
from runtime.agent.errors import CallTimeout, NodeFailed, TrainplaneError
from runtime.agent.net.flight import numeric
from runtime.agent.net.loop import Timer
from runtime.agent.net.messages import Response
from runtime.agent.net.peer import Answer, Batch, Exchange, PeerTransport
from runtime.agent.rendezvous.tree import Plan
from runtime.agent.service.calls import ExecRequest
from runtime.agent.service.drivers import Driver
from runtime.agent.service.executor import LocalCall, LocalExecutor, RankDone, RankFailed
from runtime.agent.service.silence import SilenceReport
from runtime.agent.spec.wire import error_body, error_from_body, error_status
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


Event = Union[RankDone, RankFailed, Abort]
"""What a hop is told from outside its children's answers (:meth:`Hop.feed`)."""


@dataclass(frozen=True)
class Results:
    """A call's results on a subtree (or the whole job): ``values[i]`` is rank ``ranks[i]``'s result."""

    ranks: tuple[int, ...]
    values: tuple[Any, ...]


Outcome = Union[Results, TrainplaneError]


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

    def send_cancels(self, nodes: Sequence[Node], call_id: str, driver: Driver, then: Callable[[], None]) -> None:
        """Cancel ``call_id`` on ``nodes`` (each cancels its subtree), say which did not acknowledge, and
        call ``then`` once every one has answered or :data:`CANCEL_TIMEOUT` passed (a step of ``driver``)."""
        if not nodes:
            then()
            return
        body = json.dumps({"cancel": call_id}).encode()
        exchanges = [Exchange(n.addr, n.port, "POST", contract.ROUTE_EXEC, body) for n in nodes]
        left = [len(nodes)]

        def check(answer: Answer) -> None:
            if not answer.ok:
                node = nodes[answer.index]
                self.say(f"cancel of call {call_id} not acknowledged by node {node.node_id} at {node.addr}:"
                         f"{node.port}: {answer.problem}")
            left[0] -= 1
            if left[0] == 0:
                then()

        driver.start(self.transport.batch(exchanges, self.clock() + CANCEL_TIMEOUT), check)


class Hop:
    """One call's run through one node, as steps of a :class:`~runtime.agent.service.drivers.Driver`.

    :meth:`start` sends the call to the children and the node's ranks; each child's answer, rank's
    result (:meth:`feed`, from any thread through the driver), cancel and timer is a step; the first
    failure, the deadline or the last answer ends it, and ``on_done`` gets the merged results in rank
    order or the error (after the children still running have been sent their cancels).

    Args:
        world: the world the call was planned against.
        me: this node's rank in it.
        request: the call, as this node received it.
        plan: this node's part: run locally or not, and its children's subtrees.
        deadline: monotonic time the call must end by, or ``None``.
        driver: runs the hop's steps.
        on_done: called once, as a step, with the outcome.
        executor: runs the call on this node's ranks (``None``: no worker processes yet).
        links: the node's transport, clock, address and log.
        output: where this node's ranks' output during the call goes (``LocalCall.output``), or ``None``.
        code: the synced tree this node's ranks import from (``LocalCall.code``), or ``""``.
        report_after: seconds after the first answer at which the ranks still out are named to the
            caller (``output``) and the log, again each period (``hang_report_after``; the
            coordinator's hop only); ``None``: no report.
    """

    def __init__(self, world: World, *, me: int, request: ExecRequest, plan: Plan, deadline: Optional[float],
                 driver: Driver, on_done: Callable[[Outcome], None], executor: Optional[LocalExecutor], links: Links,
                 output: Optional[Callable[[int, str, str], None]] = None, code: str = "",
                 report_after: Optional[float] = None) -> None:
        self._output = output
        self._code = code
        self._request = request
        self._plan = plan
        self._deadline = deadline
        self._driver = driver
        self._on_done = on_done
        self._executor = executor
        self._links = links
        self._me = me
        self._local_ranks = world.ranks_of([me]) if plan.local else []
        self._children = [world.nodes[sub[0]] for sub in plan.subtrees]
        self._child_ranks = [world.ranks_of(sub) for sub in plan.subtrees]
        self._values: dict[int, Any] = {}
        self._pending_local = set(self._local_ranks)
        self._answered: set[int] = set()
        self._reported: set[int] = set()
        self._ranks = [*self._local_ranks, *(r for sub in self._child_ranks for r in sub)]
        self._silence = SilenceReport(request.invocation.fn, self._ranks, report_after) if report_after else None
        self._batch: Optional[Batch] = None
        self._timers: list[Timer] = []
        self._ended = False

    def start(self) -> None:
        """Send the call to the children and the node's ranks, and set the deadline (a driver's step)."""
        request, executor = self._request, self._executor
        self._start_children()
        if self._local_ranks:
            if executor is None:
                self._end(NodeFailed(self._me, self._links.address, "this node has no worker processes yet"))
                return
            executor.submit(LocalCall(request.call_id, request.invocation,
                                      lambda event: self._driver.post(lambda: self.feed(event)),
                                      self._output, self._code))
        if self._deadline is not None:
            self._timers.append(self._driver.at(self._deadline, lambda: self._end(None)))
        if self._silence is not None:
            self._tick()
        self._maybe_done()

    def feed(self, event: Event) -> None:
        """A rank's result or failure, or an abort (a driver's step: post it with ``driver.post``)."""
        if self._ended:
            return
        if isinstance(event, RankDone):
            if event.rank in self._pending_local:
                self._pending_local.discard(event.rank)
                self._values[event.rank] = event.value
                self._heard()
                self._maybe_done()
        else:
            self._end(event.error)

    def _maybe_done(self) -> None:
        if not self._pending_local and len(self._answered) == len(self._children):
            self._end(None)

    def _heard(self) -> None:
        if self._silence is not None:
            self._silence.answered(self._links.clock())

    def _end(self, error: Optional[TrainplaneError]) -> None:
        """End the hop: its results, or ``error`` (``None`` with ranks still out: the deadline passed)."""
        if self._ended:
            return
        self._ended = True
        for timer in self._timers:
            timer.cancel()
        request = self._request
        unanswered = [i for i in range(len(self._children)) if i not in self._answered]
        if error is None and not (self._pending_local or unanswered or self._reported):
            ranks = tuple(sorted(self._values))
            self._on_done(Results(ranks, tuple(self._values[r] for r in ranks)))
            return
        if self._pending_local and self._executor is not None:
            self._executor.cancel(request.call_id)
        if self._batch is not None:
            self._batch.abort()
        outcome: Outcome
        if error is not None:
            outcome = error
        else:
            pending = self._pending_local | self._reported
            for i in unanswered:
                pending.update(self._child_ranks[i])
            outcome = CallTimeout(request.timeout, sorted(pending), request.invocation.fn)
        self._links.send_cancels([self._children[i] for i in unanswered], request.call_id, self._driver,
                                 lambda: self._on_done(outcome))

    def _tick(self) -> None:
        """Report the ranks still silent, if due, and look again when the next report could be."""
        if self._silence is None or self._ended:
            return
        now = self._links.clock()
        message = self._silence.report([*self._values], now)
        if message is not None:
            self._links.say(message)
            if self._output is not None:
                waiting = min(set(self._ranks) - set(self._values), default=0)
                self._output(waiting, "stderr", message + "\n")
        self._timers.append(self._driver.at(now + self._silence.wait(now), self._tick))

    def _start_children(self) -> None:
        if not self._children:
            return
        bodies = self._request.bodies(self._plan.subtrees, self._links.child_timeout(self._deadline))
        exchanges = [Exchange(child.addr, child.port, "POST", contract.ROUTE_EXEC, body)
                     for child, body in zip(self._children, bodies)]
        self._batch = self._links.transport.batch(exchanges, self._deadline)
        self._driver.start(self._batch, self._on_answer)

    def _on_answer(self, answer: Answer) -> None:
        """A child's answer (a step): merge it, or end the call with its error.

        A child still out at the deadline stays unanswered: the hop's own deadline reports its ranks.
        """
        if answer.timed_out or self._ended or answer.index in self._answered:
            return
        outcome = self._read_child(answer)
        self._answered.add(answer.index)
        if isinstance(outcome, dict):
            self._values.update(outcome)
            self._heard()
        elif isinstance(outcome, CallTimeout):
            self._reported.update(outcome.pending_ranks)
        else:
            self._end(outcome)
            return
        self._maybe_done()

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


def exec_response(outcome: Outcome) -> Response:
    """The answer to an ``/exec``: the subtree's ranks and results, or the error that ended it."""
    if isinstance(outcome, TrainplaneError):
        return Response(error_status(outcome), error_body(outcome))
    return Response(200, {"ranks": list(outcome.ranks), "results": list(outcome.values)})


def by_address(world: World, plan: Plan) -> bool:
    """Whether every child of ``plan`` has an IP address (reached without a name lookup)."""
    return all(numeric(world.nodes[subtree[0]].addr) for subtree in plan.subtrees)
