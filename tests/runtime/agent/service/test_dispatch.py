"""Service-mode dispatch over real HTTP between lightweight agents (calls run in-process).

Thirteen nodes with tree width 3 and threshold 4 make a three-level tree (1 + 3 + 9); the same
fleet with a threshold above 13 is flat. Everything between nodes is production code.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from runtime import CallTimeout, NodeFailed, RemoteError, WorkerMembershipChanged
from runtime.agent.rendezvous.tree import levels
from runtime.agent.world import Node, World
from runtime.client import VERDICT_WAIT, JobClient
from testbed.inprocess import LightweightAgent
from testbed.settings import agent_settings
from tests.conftest import wait_until
from tests.runtime import inprocess_fns

pytestmark = pytest.mark.unit

TOKEN = "dispatch-test-token"
FNS = "tests.runtime.inprocess_fns"


class Fleet:
    """``nodes`` lightweight agents on 127.0.0.1 sharing one world, ``num_proc`` ranks each."""

    def __init__(self, nodes: int, num_proc: int, threshold: int, fanout: int, late: tuple[int, ...] = (),
                 verdict_wait: float = VERDICT_WAIT) -> None:
        self.agents = []
        for i in range(nodes):
            settings = agent_settings(job_name="fleet", token=TOKEN, node_id=i, workers=nodes, num_proc=num_proc,
                                      mode="service", tree_threshold=threshold, tree_fanout=fanout)
            agent = LightweightAgent(settings, say=lambda _line: None)
            agent.start()
            self.agents.append(agent)
        self.world = World(job="fleet", generation=1, restart_count=0, max_restarts=0, master_port=29500,
                           nodes=tuple(Node(i, "127.0.0.1", a.port, num_proc) for i, a in enumerate(self.agents)))
        for i, agent in enumerate(self.agents):
            if i not in late:
                agent.join(self.world)
        self.client = JobClient(f"http://127.0.0.1:{self.agents[0].port}", TOKEN, verdict_wait=verdict_wait)

    def stats(self, key: str) -> list[int]:
        return [a.service.stats()[key] for a in self.agents]

    def stop(self) -> None:
        self.client.close()
        stoppers = [threading.Thread(target=agent.stop) for agent in self.agents]
        for thread in stoppers:
            thread.start()
        for thread in stoppers:
            thread.join()


@pytest.fixture(scope="module")
def tree() -> Iterator[Fleet]:
    fleet = Fleet(13, 2, threshold=4, fanout=3)
    yield fleet
    fleet.stop()


@pytest.fixture(scope="module")
def flat() -> Iterator[Fleet]:
    fleet = Fleet(13, 2, threshold=100, fanout=3)
    yield fleet
    fleet.stop()


def test_the_tree_has_three_levels():
    assert levels(13, threshold=4, width=3) == 3


def test_tree_and_flat_return_every_rank_in_order_whatever_the_completion_order(tree: Fleet, flat: Fleet):
    for seed in range(3):
        sent_tree, sent_flat = tree.stats("requests_sent"), flat.stats("requests_sent")
        from_tree = tree.client.call(f"{FNS}:delayed_rank", 0.05, seed, timeout=20)
        from_flat = flat.client.call(f"{FNS}:delayed_rank", 0.05, seed, timeout=20)
        assert from_tree == from_flat == list(range(26))
        tree_delta = [b - a for a, b in zip(sent_tree, tree.stats("requests_sent"))]
        flat_delta = [b - a for a, b in zip(sent_flat, flat.stats("requests_sent"))]
        # Tree: the coordinator sends to 3 children (nodes 1, 5, 9), each forwards to its 3; leaves send nothing.
        assert tree_delta == [3, 3, 0, 0, 0, 3, 0, 0, 0, 3, 0, 0, 0]
        assert flat_delta == [12] + [0] * 12


@pytest.mark.parametrize(("workers", "ranks"), [([2, 5, 6, 9, 11], [4, 5, 10, 11, 12, 13, 18, 19, 22, 23]),
                                                ([0, 12], [0, 1, 24, 25]), ([7], [14, 15])])
def test_a_subset_of_nodes_answers_for_its_ranks_only(tree: Fleet, flat: Fleet, workers: list[int], ranks: list[int]):
    assert tree.client.call(f"{FNS}:delayed_rank", 0.02, 1, timeout=20, node_ranks=workers) == ranks
    assert flat.client.call(f"{FNS}:delayed_rank", 0.02, 1, timeout=20, node_ranks=workers) == ranks


def test_an_exception_deep_in_the_tree_is_a_remote_error_and_cancels_every_running_subtree(tree: Fleet):
    """Every other rank waits at a gate opened only after the call returned: had the error waited
    for them, the call would have ended in its timeout instead."""
    cancels = tree.stats("cancels")
    gate = inprocess_fns.gate("deep-error")
    try:
        with pytest.raises(RemoteError) as info:
            tree.client.call(f"{FNS}:fail_on_gated", 25, "deep-error", timeout=20)
    finally:
        gate.set()
    error = info.value
    assert (error.rank, error.node_rank, error.exc_type) == (25, 12, "KeyError")
    assert "rank 25 has no key" in error.message
    assert 'raise KeyError(f"rank {bad_rank} has no key")' in error.remote_traceback

    def cancelled() -> list[int]:
        return [n for n, (a, b) in enumerate(zip(cancels, tree.stats("cancels"))) if b > a]

    # Node 12 failed; its parent 9 cancelled 10 and 11; the coordinator cancelled 1 and 5, which cancel
    # their children after acknowledging. Nobody cancels the coordinator, node 9 (it reported the error)
    # or node 12.
    assert wait_until(lambda: cancelled() == [1, 2, 3, 4, 5, 6, 7, 8, 10, 11], timeout=5), cancelled()
    assert tree.client.call(f"{FNS}:delayed_rank", 0.0, 0, timeout=20) == list(range(26))


@pytest.mark.parametrize("fleet", ["tree", "flat"])
def test_a_missed_deadline_names_exactly_the_ranks_that_had_not_answered(fleet: str, request):
    """Ranks 7 and 20 wait at a gate opened only after the call returned: only the deadline can end it."""
    job: Fleet = request.getfixturevalue(fleet)
    gate = inprocess_fns.gate(f"deadline-{fleet}")
    try:
        with pytest.raises(CallTimeout) as info:
            job.client.call(f"{FNS}:gated_on", [7, 20], f"deadline-{fleet}", timeout=0.5)
    finally:
        gate.set()
    assert info.value.pending_ranks == (7, 20)
    assert info.value.timeout == 0.5
    assert job.client.call(f"{FNS}:delayed_rank", 0.0, 0, timeout=20) == list(range(26))


def test_failing_the_calls_in_flight_reaches_the_client_as_that_exception(flat: Fleet):
    change = WorkerMembershipChanged(["127.0.0.9"], ["127.0.0.1"], ["127.0.0.1"], ["127.0.0.9"], 2)
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            flat.client.call(f"{FNS}:sleep_on", [3], 2.0, timeout=20)
        except WorkerMembershipChanged as exc:
            outcome.append(exc)

    calls = flat.stats("calls")[0]
    thread = threading.Thread(target=call)
    thread.start()
    assert wait_until(lambda: flat.stats("calls")[0] > calls and flat.agents[0].service.in_flight, timeout=10)
    flat.agents[0].service.fail_in_flight(change)
    thread.join(timeout=10)
    assert len(outcome) == 1 and vars(outcome[0]) == vars(change)


def test_an_unreachable_node_fails_the_call_naming_it():
    # The job goes on running without node 2, so the client's ask of /info whether it ended (after the
    # NodeFailed) hears "running" at once: a fraction of a second of it is as good as the default 3 s.
    fleet = Fleet(4, 1, threshold=100, fanout=3, verdict_wait=0.3)
    try:
        assert fleet.client.call(f"{FNS}:delayed_rank", 0.0, 0, timeout=10) == [0, 1, 2, 3]
        fleet.agents[2].stop()
        with pytest.raises(NodeFailed) as info:
            fleet.client.call(f"{FNS}:delayed_rank", 0.0, 0, timeout=10)
        assert info.value.node_rank == 2
        assert f":{fleet.agents[2].port}" in info.value.address
    finally:
        fleet.stop()


def test_a_node_whose_world_push_is_still_in_flight_takes_the_exec_once_it_lands():
    fleet = Fleet(4, 1, threshold=100, fanout=3, late=(3,))
    try:
        threading.Timer(0.3, fleet.agents[3].join, (fleet.world,)).start()
        assert fleet.client.call(f"{FNS}:delayed_rank", 0.0, 0, timeout=10) == [0, 1, 2, 3]
    finally:
        fleet.stop()
