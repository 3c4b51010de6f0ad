"""WorkerPool on its own: a worker that cannot start, a call, and a cancelled call, with real processes."""

from __future__ import annotations

import os
import queue
import shutil
import sys
from pathlib import Path

import pytest

from runtime.agent.errors import CallCancelled, RemoteError
from runtime.agent.service.calls import Invocation
from runtime.agent.service.executor import LocalCall, RankDone, RankEvent, RankFailed
from runtime.agent.service.pool import WorkerPool
from tests.conftest import ROOT, wait_until

pytestmark = pytest.mark.process

FNS = "testbed.service_fns"


def pool_of(python: str, lines: list[str]) -> WorkerPool:
    env = {**os.environ, "RANK": "5", "NODE_RANK": "2", "PYTHONPATH": str(ROOT)}
    return WorkerPool(generation=1, node_rank=2, first_rank=5, envs=[env], say=lines.append, grace=1.0,
                      python=python)


def run(pool: WorkerPool, call_id: str, fn: str, *args: object, timeout: float = 60) -> RankEvent:
    events: queue.SimpleQueue[RankEvent] = queue.SimpleQueue()
    pool.submit(LocalCall(call_id, Invocation(fn, args=args), events.put))
    return events.get(timeout=timeout)


def test_a_worker_that_cannot_start_fails_calls_with_its_exit_code():
    lines: list[str] = []
    pool = pool_of(shutil.which("false") or "/bin/false", lines)
    pool.start()
    try:
        event = run(pool, "c1", f"{FNS}:rank")
        assert isinstance(event, RankFailed) and isinstance(event.error, RemoteError)
        assert event.error.exc_type == "WorkerUnavailable" and event.error.rank == 5
        assert "exited with code 1 before it was ready" in event.error.message
        assert any("before it was ready" in line for line in lines)
    finally:
        pool.stop(1.0)


def test_calls_run_in_one_long_lived_process_and_a_cancelled_call_is_interrupted(tmp_path: Path):
    lines: list[str] = []
    pool = pool_of(sys.executable, lines)
    pool.start()
    try:
        assert wait_until(lambda: pool.ready == 1, timeout=60)
        pid = pool.pids[0]
        assert run(pool, "c1", f"{FNS}:rank") == RankDone(5, 5)
        marker = tmp_path / "running"
        events: queue.SimpleQueue[RankEvent] = queue.SimpleQueue()
        pool.submit(LocalCall("c2", Invocation(f"{FNS}:mark_then_sleep", args=(str(marker), 60.0)), events.put))
        assert wait_until(marker.exists, timeout=30)
        pool.cancel("c2")
        cancelled = events.get(timeout=10)
        assert isinstance(cancelled, RankFailed) and isinstance(cancelled.error, CallCancelled)
        assert "interrupted" in str(cancelled.error)
        after = run(pool, "c3", f"{FNS}:whoami")
        assert isinstance(after, RankDone) and after.value["pid"] == pid and after.value["calls"] == 1
    finally:
        pool.stop(1.0)
    assert pool.ready == 0


def test_a_renumbered_pool_answers_for_its_new_ranks():
    lines: list[str] = []
    pool = pool_of(sys.executable, lines)
    pool.start()
    try:
        assert wait_until(lambda: pool.ready == 1, timeout=60)
        assert run(pool, "c1", "os:getpid").rank == 5
        pool.renumber(3)
        assert pool.ranks == (3,)
        event = run(pool, "c2", "os:getpid")
        assert isinstance(event, RankDone) and event.rank == 3 and event.value == pool.pids[0]
    finally:
        pool.stop(1.0)
