"""A service job whose node 0 agent stalls, or carries a large call, keeps one world (issue 20, item 5).

``LocalCompute(workers=2)``, node 0's agent (the coordinator, where calls arrive) stopped for 5 s
(1.7 TTLs) with ``SIGSTOP``, between calls or while one is in flight: a world of two nodes never
fails over (one survivor is no majority of two, ``rendezvous.election``), so node 1 waits, orphaned,
and no second world forms. Before the fencing rule node 1 took over in a world of its own, and every
later call failed with ``NodeFailed`` naming two generations while ``/members`` reported a healthy
job. Afterwards the calls answer from every node, and ``/members`` and ``info()`` describe the world
they reached (its generation, its nodes). Under load (a call body near the 16 MiB cap, 20 MiB of
results) node 0 is busy parsing and encoding, not stopped: the job keeps its generation, at two
nodes and at three (where a takeover could happen).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.agent import contract
from runtime.client import JobClient
from runtime.workflow import LocalCompute, fn
from runtime.workflow.local_compute import AGENTS_LOG
from testbed import service_fns
from tests.conftest import fault_lasts, wait_until

pytestmark = pytest.mark.process

STALL = 5.0
"""Seconds node 0's agent is stopped: the experiment's input."""


def local(workers: int, log_dir: Path) -> LocalCompute:
    """A job of ``workers`` nodes writing its agents' log to ``log_dir``."""
    return LocalCompute(workers=workers, num_proc=1, grace_period=1.0, log_dir=str(log_dir))


def agents_log(compute: LocalCompute) -> str:
    """The agents' log of ``compute``'s job, for a failure's message."""
    assert compute.log_dir is not None
    return (Path(compute.log_dir) / AGENTS_LOG).read_text(errors="replace")


@pytest.fixture
def compute(tmp_path: Path) -> Iterator[LocalCompute]:
    compute = local(2, tmp_path / "logs")
    try:
        yield compute
    finally:
        compute.teardown()


def node0(compute: LocalCompute) -> int:
    assert compute.job is not None
    return compute.job.agents[0].pid


def assert_one_world(compute: LocalCompute, nodes: int) -> int:
    """A call reaches every rank of ``nodes`` nodes in one generation, and ``/members`` and ``info()``
    report that generation with those nodes running. Returns the generation."""
    reached = fn(service_fns.environment).to(compute)([contract.TRAINPLANE_GENERATION, "NODE_RANK"])
    assert compute.job is not None
    generations = {r[contract.TRAINPLANE_GENERATION] for r in reached}
    assert len(generations) == 1, (reached, agents_log(compute))
    generation = int(generations.pop())
    assert sorted(int(r["NODE_RANK"]) for r in reached) == list(range(nodes)), (reached, agents_log(compute))
    with JobClient(compute.job.url, compute.job.token) as client:
        info, members = client.info(), client.members()
    assert (info.generation, info.status) == (generation, "running"), (info.raw, agents_log(compute))
    assert members.generation == generation, (members.raw, agents_log(compute))
    running = sorted(m["node_rank"] for m in members.raw["members"]
                     if m["node_rank"] is not None and m["state"] == "running")
    assert running == list(range(nodes)), (members.raw, agents_log(compute))
    return generation


def test_calls_work_again_after_node_0s_agent_stalled_5_s(compute: LocalCompute):
    rank = fn(service_fns.rank).to(compute)
    assert rank() == [0, 1]
    before = assert_one_world(compute, 2)
    pid = node0(compute)
    os.kill(pid, signal.SIGSTOP)
    fault_lasts(STALL)
    os.kill(pid, signal.SIGCONT)
    assert rank() == [0, 1]
    assert rank() == [0, 1], "and the call after it"
    assert assert_one_world(compute, 2) == before


def test_a_call_in_flight_while_node_0s_agent_stalls_returns_and_the_next_ones_too(compute: LocalCompute,
                                                                                   tmp_path: Path):
    """The call runs on both ranks when node 0's agent stops; node 1's rank finishes during the stall
    (its answer waits for node 0), node 0's once the agent is back: the call returns both."""
    before = assert_one_world(compute, 2)
    gate, prefix = tmp_path / "gate", str(tmp_path / "started")
    answer: list[object] = []
    call = threading.Thread(target=lambda: answer.append(fn(service_fns.mark_then_wait).to(compute)(prefix,
                                                                                                    str(gate))))
    call.start()
    pid = node0(compute)
    try:
        assert wait_until(lambda: all(os.path.exists(f"{prefix}-{r}") for r in (0, 1)), timeout=60)
        os.kill(pid, signal.SIGSTOP)
        fault_lasts(STALL / 2)
        gate.touch()
        fault_lasts(STALL / 2)
    finally:
        os.kill(pid, signal.SIGCONT)
        gate.touch()
        call.join(timeout=60)
    assert answer == [[0, 1]]
    assert fn(service_fns.rank).to(compute)() == [0, 1]
    assert assert_one_world(compute, 2) == before


@pytest.mark.parametrize("workers", [2, 3])
def test_a_16_mib_call_body_and_20_mib_of_results_keep_the_world(workers: int, tmp_path: Path):
    compute = local(workers, tmp_path / "logs")
    try:
        before = assert_one_world(compute, workers)
        body = service_fns.blob_of(-1, contract.MAX_BODY_BYTES - 64 * 1024)  # the rest: the call's envelope
        digests = fn(service_fns.digest).to(compute)(body)
        expected = service_fns.digest(body)
        assert [(d["rank"], d["generation"], d["length"], d["sha256"]) for d in digests] == [
            (r, str(before), expected["length"], expected["sha256"]) for r in range(workers)]
        size = 20 * 1024 * 1024 // workers
        blobs = fn(service_fns.blob).to(compute)(size)
        assert [len(b) for b in blobs] == [size] * workers
        assert blobs == [service_fns.blob_of(r, size) for r in range(workers)]
        assert assert_one_world(compute, workers) == before
    finally:
        compute.teardown()
