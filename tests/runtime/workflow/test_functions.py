"""The workflow API: locating functions, deploying, resizing with .to(), teardown; the example end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Callable

import pytest

from runtime import CallTimeout
from runtime.agent.errors import ConfigError
from runtime.workflow import CallOptions, LocalCompute, Location, RemoteFunction, fn, locate
from testbed import service_fns
from tests.conftest import ROOT, processes_with, project_env, wait_until
from tests.runtime.pkg_for_locate import in_init

pytestmark = pytest.mark.process


def test_locate_names_module_functions_and_the_directory_to_import_from():
    located = locate(service_fns.whoami)
    assert (located.name, located.root) == ("testbed.service_fns:whoami", str(ROOT))
    assert locate(in_init) == Location("tests.runtime.pkg_for_locate:in_init", str(ROOT))
    assert locate(LocalCompute.teardown) == Location("runtime.workflow.compute:Compute.teardown", str(ROOT))


def make_closure() -> Callable[[], int]:
    """A function defined inside another one."""

    def inner() -> int:
        return 2

    return inner


def undecorated(func: Callable[[], int]) -> Callable[[], int]:
    """A decorator that forgets functools.wraps: the module name then refers to its wrapper."""

    def wrapper() -> int:
        return func()

    return wrapper


def rebound() -> int:
    """Replaced below by another function under the same name."""
    return 3


original_rebound = rebound
rebound = undecorated(rebound)


@pytest.mark.parametrize(("func", "why"), [
    (lambda: 1, r"fn\(<lambda>\) is a lambda: .* define it with def at the top level of a module"),
    (make_closure(), r"is defined inside make_closure\(\): .* move it to the top level of its module"),
    (len, r"fn\(len\) has no Python source file \(it is built in or compiled\)"),
    (LocalCompute().teardown, r"is a bound method: a job's processes cannot get its instance"),
    (original_rebound, r"is not what tests.runtime.workflow.test_functions:rebound names \(the name was rebound"),
], ids=["lambda", "closure", "builtin", "bound-method", "rebound"])
def test_functions_other_processes_cannot_import_by_name_are_refused_at_once_saying_why(func, why: str):
    with pytest.raises(ValueError, match=why):
        fn(func)


@pytest.mark.parametrize(("kwargs", "field"), [({"workers": 0}, "workers"), ({"num_proc": 0}, "num_proc"),
                                               ({"distribution": "mpi"}, "distribution"),
                                               ({"serialization": "yaml"}, "serialization")])
def test_bad_compute_settings_name_the_field(kwargs, field: str):
    with pytest.raises(ConfigError, match=field):
        LocalCompute(**kwargs)


def test_deploy_call_resize_and_teardown():
    compute = LocalCompute(workers=2, num_proc=1, grace_period=1.0).distribute("pytorch")
    assert compute.distribution == "pytorch" and not compute.running
    remote = fn(service_fns.whoami).to(compute).options(timeout=60)
    bigger = LocalCompute(workers=3, num_proc=1, grace_period=1.0)
    try:
        job = compute.job
        assert job is not None
        first = remote()
        assert [r["rank"] for r in first] == [0, 1]
        assert [r["calls"] for r in remote()] == [2, 2]
        assert fn(service_fns.rank).to(compute)() == [0, 1], "a second function shares the job"
        resized = remote.to(bigger)
        assert not compute.running
        assert wait_until(lambda: not processes_with(job.job), timeout=15)
        assert resized.call_options.timeout == 60, "moving keeps the call options"
        assert [r["rank"] for r in resized()] == [0, 1, 2]
        assert [r["node_rank"] for r in resized()] == [0, 1, 2]
    finally:
        remote.teardown()
        resized_job = bigger.job
        bigger.teardown()
    assert not bigger.running and resized_job is not None
    assert wait_until(lambda: not processes_with(resized_job.job), timeout=15)
    with pytest.raises(RuntimeError, match="not deployed"):
        resized()


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[LocalCompute]:
    """One running 2 x 1 local job for the call-option tests."""
    compute = LocalCompute(workers=2, num_proc=1, grace_period=1.0)
    fn(service_fns.rank).to(compute)
    try:
        yield compute
    finally:
        compute.teardown()


def test_every_keyword_reaches_the_function_even_timeout_and_workers(two_nodes: LocalCompute):
    echo = fn(service_fns.echo).to(two_nodes)

    results = echo(1, timeout=5, workers=[1], node_ranks=2)

    assert results == [{"rank": r, "args": [1], "kwargs": {"timeout": 5, "workers": [1], "node_ranks": 2}}
                       for r in (0, 1)]


def test_the_deadline_is_a_call_option_that_cancels_the_call(two_nodes: LocalCompute):
    sleep_on = fn(service_fns.sleep_on).to(two_nodes)

    with pytest.raises(CallTimeout, match=r"sleep_on did not finish within 1 s: rank\(s\) 1 had not answered") as info:
        sleep_on.options(timeout=1.0)([1], 60.0)

    assert info.value.pending_ranks == (1,)
    assert sleep_on([], 0.0) == [0, 1], "the options belong to the view they were set on"


def test_node_ranks_pick_the_nodes_and_options_compose(two_nodes: LocalCompute):
    rank = fn(service_fns.rank).to(two_nodes)
    on_node_1 = rank.options(node_ranks=[1])

    assert on_node_1() == [1]
    assert on_node_1.options(timeout=30)() == [1], "a later options() keeps the node ranks"
    assert on_node_1.options(node_ranks=None)() == [0, 1]
    assert rank.options(node_ranks=range(2))() == [0, 1]
    assert on_node_1.call_options == CallOptions(timeout=None, node_ranks=(1,))


def test_todays_timeout_and_workers_keywords_say_where_the_options_went_before_anything_runs(two_nodes):
    whoami = fn(service_fns.whoami).to(two_nodes)
    before = [r["calls"] for r in whoami()]

    with pytest.raises(TypeError, match=r"whoami\(max_delay.*unexpected keyword argument 'timeout'; the call's "
                                        r"deadline is a call option: use whoami.options\(timeout=SECONDS\)"):
        whoami(timeout=60)
    with pytest.raises(TypeError, match=r"use whoami.options\(node_ranks=\[0, 1\]\)\(...\); the number of nodes "
                                        r"is the compute's workers"):
        whoami(workers=[0])
    with pytest.raises(TypeError, match=r"too many positional arguments$"):
        whoami(0.0, 1, 2)

    assert [r["calls"] for r in whoami()] == [c + 1 for c in before], "the refused calls ran nowhere"


@pytest.mark.parametrize(("options", "message"), [
    ({"timeout": 0}, r"^timeout=0 is invalid: use seconds > 0, or None"),
    ({"timeout": -1.5}, r"^timeout=-1.5 is invalid"),
    ({"timeout": "5"}, r"^timeout='5' is invalid"),
    ({"timeout": True}, r"^timeout=True is invalid"),
    ({"timeout": float("inf")}, r"^timeout=inf is invalid"),
    ({"node_ranks": 4}, r"^node_ranks=4 is invalid: it lists the node ranks to run on, e.g. node_ranks=\[0\] or "
                        r"range\(2\), not a number of nodes"),
    ({"node_ranks": []}, r"^node_ranks=\(\) is invalid: use distinct node ranks >= 0"),
    ({"node_ranks": [0, 0]}, r"^node_ranks=\(0, 0\) is invalid"),
    ({"node_ranks": [-1]}, r"^node_ranks=\(-1,\) is invalid"),
    ({"node_ranks": [True]}, r"^node_ranks=\(True,\) is invalid"),
    ({"node_ranks": "0"}, r"^node_ranks='0' is invalid: it lists the node ranks"),
])
def test_bad_call_options_name_the_option_and_the_fix(options, message: str):
    remote = RemoteFunction(fn(service_fns.rank), LocalCompute())
    with pytest.raises(ConfigError, match=message):
        remote.options(**options)


def test_the_service_digits_example_trains_across_calls_then_evaluates(tmp_path: Path):
    summary_path = tmp_path / "summary.json"
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples/service_digits.py"), "--workers", "2", "--num-proc", "2",
         "--calls", "3", "--epochs-per-call", "4", "--summary", str(summary_path)],
        cwd=tmp_path, env=project_env(), capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(summary_path.read_text())
    calls, evaluation = summary["train"], summary["evaluate"]
    assert [[r["epoch"] for r in call] for call in calls] == [[4] * 4, [8] * 4, [12] * 4]
    assert all([r["rank"] for r in call] == [0, 1, 2, 3] for call in calls)
    pids = [r["pid"] for r in calls[0]]
    assert all([r["pid"] for r in call] == pids for call in calls[1:]), "processes must live across calls"
    assert [r["pid"] for r in evaluation] == pids
    assert calls[-1][0]["loss"] < calls[0][0]["loss"]
    assert len({r["params"] for r in evaluation}) == 1
    assert evaluation[0]["accuracy"] >= 0.90
    assert "held-out accuracy" in result.stdout and "call 3/3: epoch 12" in result.stdout
