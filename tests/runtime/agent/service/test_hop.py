"""Dispatch without sockets: service nodes wired through the in-memory transport, a fake clock for deadlines."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from runtime.agent import contract
from runtime.agent.errors import CallTimeout, NodeFailed, RemoteError
from runtime.agent.net.server import Request
from runtime.agent.service import dispatch
from runtime.agent.service.dispatch import ServiceNode
from runtime.agent.service.drivers import ThreadDriver
from runtime.agent.spec.wire import error_from_body
from runtime.agent.world import Node, World
from testbed.inprocess import InProcessExecutor
from testbed.settings import agent_settings
from testbed.transport import FakeNetwork, FakeTransport
from tests.conftest import wait_until
from tests.runtime import inprocess_fns

pytestmark = pytest.mark.unit

TOKEN = "hop-token"
FNS = "tests.runtime.inprocess_fns"


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Fleet:
    """``nodes`` service nodes of one world, one rank each, reached through a :class:`FakeNetwork`."""

    def __init__(self, nodes: int, threshold: int, fanout: int) -> None:
        self.clock = Clock()
        self.network = FakeNetwork()
        self.world = World(job="hop", generation=1, restart_count=0, max_restarts=0, master_port=29500,
                           nodes=tuple(Node(i, f"10.0.0.{i}", 32300, 1) for i in range(nodes)))
        self.unreachable: list[int] = []
        self.transports = []
        self.nodes = []
        for i in range(nodes):
            settings = agent_settings(job_name="hop", token=TOKEN, node_id=i, workers=nodes, mode="service",
                                      tree_threshold=threshold, tree_fanout=fanout)
            transport = FakeTransport(self.network, TOKEN, self.clock)
            node = ServiceNode(settings, world=lambda: self.world, say=lambda _line: None,
                               on_unreachable=lambda n: self.unreachable.append(n.node_id), clock=self.clock,
                               transport=transport)
            node.use_executor(InProcessExecutor([i], i))
            self.network.serve(f"10.0.0.{i}", 32300, TOKEN, node.routes())
            self.transports.append(transport)
            self.nodes.append(node)

    def call(self, fn: str, *args: Any, **body: Any) -> tuple[int, dict[str, Any]]:
        response = self.nodes[0].route_call(Request("POST", contract.ROUTE_CALL,
                                                    json.loads(json.dumps({"fn": f"{FNS}:{fn}", "args": list(args),
                                                                           **body})), "test"))
        return response.status, dict(response.body)

    def sent_to(self, node_id: int) -> list[str]:
        """Where node ``node_id`` sent its exchanges, as ``host`` strings, in order."""
        return [e.host for e in self.transports[node_id].exchanges]


@pytest.fixture
def tree() -> Iterator[Fleet]:
    yield Fleet(13, threshold=4, fanout=3)


def test_a_tree_call_merges_every_rank_in_order_and_each_node_sends_to_its_own_children_only(tree: Fleet):
    status, body = tree.call("delayed_rank", 0.01, 3, timeout=20)
    assert (status, body["ranks"], body["results"]) == (200, list(range(13)), list(range(13)))
    assert tree.sent_to(0) == ["10.0.0.1", "10.0.0.5", "10.0.0.9"]
    assert tree.sent_to(1) == ["10.0.0.2", "10.0.0.3", "10.0.0.4"]
    assert [tree.transports[i].sent for i in range(13)] == [3, 3, 0, 0, 0, 3, 0, 0, 0, 3, 0, 0, 0]


def test_a_refused_child_fails_the_call_naming_it_and_is_reported_unreachable(tree: Fleet):
    tree.network.stop("10.0.0.5", 32300)
    status, body = tree.call("delayed_rank", 0.0, 0, timeout=20)
    error = error_from_body(body)
    assert status == 502 and isinstance(error, NodeFailed)
    assert (error.node_rank, error.address) == (5, "10.0.0.5:32300") and "refused" in error.reason
    assert tree.unreachable == [5]


def test_a_leaf_error_climbs_and_the_running_subtrees_are_cancelled(tree: Fleet):
    gate = inprocess_fns.gate("hop-leaf-error")
    try:
        status, body = tree.call("fail_on_gated", 12, "hop-leaf-error", timeout=20)
    finally:
        gate.set()
    error = error_from_body(body)
    assert status == 500 and isinstance(error, RemoteError) and (error.rank, error.node_rank) == (12, 12)
    cancels = {i: [e.host for e in t.exchanges if e.body and b'"cancel"' in e.body]
               for i, t in enumerate(tree.transports)}
    assert cancels[9] == ["10.0.0.10", "10.0.0.11"], "node 12's parent cancels its other children"
    assert cancels[0] == ["10.0.0.1", "10.0.0.5"], "the coordinator cancels the subtrees still running"


class CountingDriver(ThreadDriver):
    """A :class:`ThreadDriver` that counts the steps it has run and knows the thread that made it."""

    made: list[CountingDriver] = []

    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__(clock)
        self.thread = threading.current_thread()
        self.steps_run = 0
        CountingDriver.made.append(self)

    def post(self, step: Callable[[], None]) -> None:
        def counted() -> None:
            step()
            self.steps_run += 1
        super().post(counted)


def test_the_deadline_on_the_fake_clock_names_exactly_the_ranks_still_out(monkeypatch: pytest.MonkeyPatch):
    """The coordinator's own rank 0 and node 1's rank 1 wait at gates. Rank 1 is let go; once its answer has
    reached the coordinator (a step its driver has run), the clock passes the deadline, and the coordinator's
    next look at its timers ends the call naming rank 0 alone, though no real time reached the deadline. That
    look comes at once: the test posts the driver a step that does nothing (a driver looks at its timers
    whenever a step has run, else once per real second).

    The clock moves only after node 1's answer is a step run: a move before it could let either node's
    deadline fire first and name rank 1 too."""
    monkeypatch.setattr(dispatch, "ThreadDriver", CountingDriver)
    monkeypatch.setattr(CountingDriver, "made", [])
    fleet = Fleet(2, threshold=100, fanout=3)
    late, stuck = inprocess_fns.gate("hop-late"), inprocess_fns.gate("hop-stuck")
    outcome: list[tuple[int, dict[str, Any]]] = []
    caller = threading.Thread(target=lambda: outcome.append(fleet.call("gated_two", 1, "hop-late", 0, "hop-stuck",
                                                                       timeout=60.0)))
    try:
        caller.start()
        assert wait_until(lambda: {"hop-late", "hop-stuck"} <= inprocess_fns.AT_GATE, timeout=10)
        [coordinator] = [d for d in CountingDriver.made if d.thread is caller]
        late.set()
        assert wait_until(lambda: coordinator.steps_run >= 1, timeout=10), "node 1's answer reaches the coordinator"
        fleet.clock.now = 61.0
        coordinator.post(lambda: None)
        caller.join(timeout=20)
    finally:
        stuck.set()
    [(status, body)] = outcome
    error = error_from_body(body)
    assert status == 504 and isinstance(error, CallTimeout)
    assert error.pending_ranks == (0,) and error.timeout == 60.0
