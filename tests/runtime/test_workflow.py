"""The workflow API: locating functions, deploying, resizing with .to(), teardown; the example end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.agent.errors import ConfigError
from runtime.workflow import LocalCompute, Location, fn, locate
from tests.conftest import ROOT, processes_with, project_env, wait_until
from tests.runtime import service_fns
from tests.runtime.pkg_for_locate import in_init


def test_locate_names_module_functions_and_the_directory_to_import_from():
    located = locate(service_fns.whoami)
    assert (located.name, located.root) == ("tests.runtime.service_fns:whoami", str(ROOT))
    assert locate(in_init) == Location("tests.runtime.pkg_for_locate:in_init", str(ROOT))
    assert locate(LocalCompute.teardown) == Location("runtime.workflow:Compute.teardown", str(ROOT))


def test_locate_names_driver_script_functions_by_the_script_stem(tmp_path: Path):
    script = tmp_path / "driver.py"
    script.write_text("def work():\n    return 1\n")
    namespace: dict = {"__name__": "__main__"}
    exec(compile(script.read_text(), str(script), "exec"), namespace)  # noqa: S102 - our own test script
    located = locate(namespace["work"])
    assert (located.name, located.root) == ("driver:work", str(tmp_path))


def make_closure() -> object:
    """A function defined inside another one."""

    def inner() -> int:
        return 2

    return inner


@pytest.mark.parametrize("func", [lambda: 1, make_closure(), len], ids=["lambda", "closure", "builtin"])
def test_functions_other_processes_cannot_import_by_name_are_refused(func):
    with pytest.raises(ValueError, match="define it"):
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
    remote = fn(service_fns.whoami).to(compute)
    try:
        job = compute.job
        assert job is not None
        first = remote(timeout=60)
        assert [r["rank"] for r in first] == [0, 1]
        assert [r["calls"] for r in remote(timeout=60)] == [2, 2]
        assert fn(service_fns.rank).to(compute)(timeout=60) == [0, 1], "a second function shares the job"
        bigger = LocalCompute(workers=3, num_proc=1, grace_period=1.0)
        resized = remote.to(bigger)
        assert not compute.running
        assert wait_until(lambda: not processes_with(job.job), timeout=15)
        assert [r["rank"] for r in resized(timeout=60)] == [0, 1, 2]
        assert [r["node_rank"] for r in resized(timeout=60)] == [0, 1, 2]
    finally:
        remote.teardown()
        resized_job = bigger.job
        bigger.teardown()
    assert not bigger.running and resized_job is not None
    assert wait_until(lambda: not processes_with(resized_job.job), timeout=15)
    with pytest.raises(RuntimeError, match="not deployed"):
        resized(timeout=5)


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
