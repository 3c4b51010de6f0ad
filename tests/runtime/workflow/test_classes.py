"""cls(): one instance per rank, methods on every rank, results in rank order, state kept between
calls (2 nodes x 2 processes, real agents and processes)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from runtime import RemoteError
from runtime.workflow import LocalCompute, RemoteInstance, cls, fn
from testbed import service_fns
from testbed.service_fns import Counter

pytestmark = pytest.mark.process


@pytest.fixture(scope="module")
def compute() -> Iterator[LocalCompute]:
    compute = LocalCompute(workers=2, num_proc=2, grace_period=1.0)
    try:
        yield compute
    finally:
        compute.teardown()


def test_one_instance_per_rank_keeps_its_state_between_calls(compute: LocalCompute):
    counter = cls(Counter, start=10).to(compute)

    first = counter.add(1)
    second = counter.add(n=5)

    assert isinstance(counter, RemoteInstance)
    assert [r["rank"] for r in first] == [0, 1, 2, 3]
    assert [r["count"] for r in first] == [11] * 4 and [r["count"] for r in second] == [16] * 4
    assert [r["pid"] for r in second] == [r["pid"] for r in first] and len({r["pid"] for r in first}) == 4
    assert counter.options(node_ranks=[1]).add(0) == second[2:], "options keep the instance"
    assert counter.twice(4) == [8] * 4


def test_two_instances_are_apart_and_a_method_error_is_a_remote_error(compute: LocalCompute):
    a, b = cls(Counter).to(compute), cls(Counter, 100).to(compute)
    a.add(1)

    assert [r["count"] for r in b.add(1)] == [101] * 4
    with pytest.raises(RemoteError, match="counter at 1 refuses"):
        a.fail()
    assert [r["count"] for r in a.add(1)] == [2] * 4, "state survives a failed call"


def test_a_process_that_is_replaced_makes_its_instance_again_and_says_so(compute: LocalCompute, capfd):
    counter = cls(Counter, 5).to(compute)
    counter.add(1)
    with pytest.raises(RemoteError, match="ProcessExited"):
        fn(service_fns.exit_on).to(compute)(2)

    counts = [r["count"] for r in counter.add(1)]

    assert counts == [7, 7, 6, 7]
    assert re.search(r"^\[rank 2\] trainplane: Counter instance \w+ made again: this process did not have it",
                     capfd.readouterr().err, re.MULTILINE)


@pytest.mark.parametrize(("make", "message"), [
    (lambda: cls(service_fns.rank), r"needs a class; for a function use fn\(\)"),
    (lambda: cls(Counter, 1, 2), r"Counter\(start=0\): too many positional arguments"),
])
def test_bad_classes_and_arguments_are_refused_before_anything_runs(make, message: str):
    with pytest.raises((ValueError, TypeError), match=message):
        make()


def test_method_arguments_are_checked_and_private_names_are_not_methods(compute: LocalCompute):
    counter = cls(Counter).to(compute)
    with pytest.raises(TypeError, match=r"Counter.add\(n=1\): got an unexpected keyword argument 'm'"):
        counter.add(m=1)
    with pytest.raises(AttributeError):
        counter._hidden()
    with pytest.raises(AttributeError, match="has no method 'missing'"):
        counter.missing()
