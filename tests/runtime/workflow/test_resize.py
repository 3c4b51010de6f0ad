"""Resize in place: .to() a LocalCompute of the same shape at another size grows or shrinks the
running job through elastic membership; the next call runs at the new world size in the same
processes, which see the change (real agents and processes)."""

from __future__ import annotations

import pytest

from runtime.agent.errors import ConfigError
from runtime.workflow import LocalCompute, fn
from testbed import service_fns
from tests.conftest import processes_with, wait_until

pytestmark = pytest.mark.process


def compute_of(workers: int, num_proc: int = 1) -> LocalCompute:
    return LocalCompute(workers=workers, num_proc=num_proc, grace_period=1.0)


def test_a_job_grows_and_shrinks_in_place_and_its_processes_see_the_change():
    computes = [compute_of(2), compute_of(3), compute_of(2)]
    small, bigger, smaller = computes
    try:
        whoami = fn(service_fns.whoami).to(small)
        job = small.job
        assert job is not None
        before = whoami()

        grown = whoami.to(bigger)

        assert bigger.job is job and not small.running, "the same job, now held by the new compute"
        after = grown()
        assert [r["rank"] for r in after] == [0, 1, 2]
        assert [r["pid"] for r in after[:2]] == [r["pid"] for r in before], "in the same processes"
        assert [r["calls"] for r in after[:2]] == [r["calls"] + 1 for r in before], "with their state"
        seen = fn(service_fns.change_seen).to(bigger)(1)
        assert [s["world_size"] for s in seen] == [3, 3, 3]
        assert seen[0]["added"] == [job.plan.addresses[2]] and seen[0]["generation"] >= 2
        third = job.agents[2]

        shrunk = grown.to(smaller)

        assert [r["rank"] for r in shrunk()] == [0, 1]
        assert [r["pid"] for r in shrunk()] == [r["pid"] for r in before]
        assert third.poll() is not None and len(job.agents) == 2, "node 2's agent was stopped"
    finally:
        for compute in computes:
            compute.teardown()
    assert wait_until(lambda: not processes_with(job.job), timeout=15), "teardown stopped every agent"


def test_another_shape_is_a_new_job():
    computes = [compute_of(2), compute_of(2, num_proc=2)]
    try:
        rank = fn(service_fns.rank).to(computes[0])
        job = computes[0].job
        moved = rank.to(computes[1])
        assert computes[1].job is not job and moved() == [0, 1, 2, 3]
        assert wait_until(lambda: not processes_with(job.job), timeout=15), "the old job was stopped"
    finally:
        for compute in computes:
            compute.teardown()


def test_a_bad_resize_limit_is_refused_naming_it():
    with pytest.raises(ConfigError, match=r"^resize_limit=0 is invalid: use the most nodes"):
        LocalCompute(resize_limit=0)
