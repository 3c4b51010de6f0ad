"""The service mode's limits as the README states them, met through the workflow API with a real job:
arguments are JSON unless the compute sends pickle, a call's body is capped at 16 MiB, and a job runs
one call at a time (the next waits for it, up to its own timeout)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime import CallTimeout, TransportError
from runtime.agent import contract
from runtime.workflow import LocalCompute, fn
from testbed import service_fns
from tests.conftest import wait_until

pytestmark = pytest.mark.process


@pytest.fixture(scope="module")
def compute() -> Iterator[LocalCompute]:
    compute = LocalCompute(workers=1, num_proc=1, grace_period=1.0)
    fn(service_fns.rank).to(compute)
    try:
        yield compute
    finally:
        compute.teardown()


def test_arguments_that_are_not_json_are_refused_before_any_rank_runs(compute: LocalCompute):
    with pytest.raises(TypeError, match=r"are not JSON-serialisable .*serialization='pickle'"):
        fn(service_fns.echo).to(compute)({1, 2})
    assert fn(service_fns.echo).to(compute)({"a": [1, 2.5, None, True, "x"]}) == [
        {"rank": 0, "args": [{"a": [1, 2.5, None, True, "x"]}], "kwargs": {}}]


def test_a_call_over_the_16_mib_body_cap_raises_413(compute: LocalCompute):
    assert contract.MAX_BODY_BYTES == 16 * 1024 * 1024
    with pytest.raises(TransportError, match="exceeds the 16777216-byte cap") as info:
        fn(service_fns.echo).to(compute)("x" * contract.MAX_BODY_BYTES)
    assert info.value.status == 413
    assert fn(service_fns.echo).to(compute)("x" * 1024 * 1024)[0]["args"][0] == "x" * 1024 * 1024


def test_a_job_runs_one_call_at_a_time(compute: LocalCompute, tmp_path: Path):
    """While one call holds the job, another waits: with a timeout it gives up saying so."""
    release, started = tmp_path / "release", tmp_path / "started-0"
    first: list[object] = []
    held = threading.Thread(target=lambda: first.append(fn(service_fns.mark_then_wait).to(compute)(
        str(tmp_path / "started"), str(release))))
    held.start()
    try:
        assert wait_until(started.exists, timeout=60)
        with pytest.raises(CallTimeout, match="another call held the job"):
            fn(service_fns.rank).to(compute).options(timeout=1.0)()
    finally:
        release.touch()
        held.join(timeout=60)
    assert first == [[0]]
    assert fn(service_fns.rank).to(compute)() == [0]
