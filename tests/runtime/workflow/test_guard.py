"""Safety of the workflow API, with real drivers run as their users run them: a driver without the
``__main__`` guard fails fast instead of nesting jobs; functions no other process can import are
refused by ``fn()`` at once, saying why; a driver run with ``python -m`` names its functions by module."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from runtime.agent import contract
from runtime.workflow import LocalCompute, NestedJobError, fn
from runtime.workflow.guard import job_process_marker, refuse_inside_job
from testbed import service_fns
from tests.conftest import processes_with, project_env, wait_until

pytestmark = pytest.mark.process

DRIVER_BODY = """\
from runtime.workflow import LocalCompute, fn


def work(x):
    return x + 1

"""
CALL = """\
remote = fn(work).to(LocalCompute(workers=2, num_proc=1, grace_period=1.0, log_dir="logs"))
print("results", remote.options(timeout=60)(41), flush=True)
remote.teardown()
"""
GUARD_HINT = ('Put the driver code (everything that calls .to() and the remote functions) under '
              '`if __name__ == "__main__":`')


def run_python(args: list[str], cwd: Path, stdin: str = "", timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` as a user runs it, from ``cwd``, with the repository importable."""
    return subprocess.run([sys.executable, *args], cwd=cwd, env=project_env(), input=stdin, capture_output=True,
                          text=True, timeout=timeout)


def test_a_driver_without_the_main_guard_fails_at_its_first_call_instead_of_nesting_jobs(tmp_path: Path):
    (tmp_path / "driver.py").write_text(DRIVER_BODY + CALL)

    result = run_python(["driver.py"], tmp_path)

    assert result.returncode == 1, result.stdout + result.stderr
    assert "NestedJobError" in result.stderr and GUARD_HINT in result.stderr, result.stderr[-3000:]
    assert ".to(LocalCompute(workers=2, num_proc=1, distribution='spmd')) was called inside rank " in result.stderr
    assert "results" not in result.stdout
    agents = (tmp_path / "logs" / "agents.log").read_text()
    assert agents.count("generation 1:") == 2, "only the driver's own job (2 nodes) ever started"
    assert "[rank 0] [trainplane node" not in agents + result.stderr, "no job was started inside a rank"
    assert wait_until(lambda: not processes_with(str(tmp_path)), timeout=20), "the job's processes are gone"


def test_the_same_driver_under_the_main_guard_runs(tmp_path: Path):
    guarded = DRIVER_BODY + 'if __name__ == "__main__":\n' + "".join(f"    {line}\n" for line in CALL.splitlines())
    (tmp_path / "driver.py").write_text(guarded)

    result = run_python(["driver.py"], tmp_path)

    assert result.returncode == 0, result.stderr[-3000:]
    assert "results [42, 42]" in result.stdout


def test_a_driver_run_with_python_m_names_its_functions_by_module_and_keeps_relative_imports(tmp_path: Path):
    package = tmp_path / "project"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "helpers.py").write_text("def plus_one(x):\n    return x + 1\n")
    (package / "driver.py").write_text(
        "from runtime.workflow import LocalCompute, fn, locate\n\nfrom .helpers import plus_one\n\n\n"
        "def work(x):\n    return plus_one(x)\n\n\nif __name__ == \"__main__\":\n"
        "    print('located', tuple(locate(work)), flush=True)\n"
        "    with fn(work).to(LocalCompute(workers=1, num_proc=2, grace_period=1.0)) as remote:\n"
        "        print('results', remote(1), flush=True)\n")

    result = run_python(["-m", "project.driver"], tmp_path)

    assert result.returncode == 0, result.stderr[-3000:]
    assert f"located ('project.driver:work', '{tmp_path}')" in result.stdout
    assert "results [2, 2]" in result.stdout


SESSION = "def f():\n    return 1\n\nfrom runtime.workflow import fn\nfn(f)\n"
INTERACTIVE = ("fn(f) was defined in an interactive session or a command string (the Python REPL, `python -`, "
               "`python -c` or a notebook), so its source is in no file a job's processes could import: put it in "
               "a .py file and import it from there")


@pytest.mark.parametrize(("args", "stdin", "code"), [
    (["-c", SESSION], "", 1),
    (["-"], SESSION, 1),
    (["-i", "-q"], SESSION, 0),  # the REPL reports the exception and carries on to the end of its input
], ids=["python -c", "python -", "REPL"])
def test_functions_typed_into_a_session_are_refused_by_fn_at_once(args: list[str], stdin: str, code: int,
                                                                 tmp_path: Path):
    result = run_python(args, tmp_path, stdin=stdin, timeout=60)

    assert result.returncode == code, result.stderr
    assert f"ValueError: {INTERACTIVE}" in result.stderr


def test_a_driver_script_whose_name_is_not_a_module_name_is_refused_with_a_rename(tmp_path: Path):
    (tmp_path / "my-driver.py").write_text(DRIVER_BODY + "fn(work)\n")

    result = run_python(["my-driver.py"], tmp_path, timeout=60)

    assert result.returncode == 1
    assert ("ValueError: fn(work) is defined in the script my-driver.py, which a job's processes would import as a "
            "module, and 'my-driver' is not a module name: rename the script (e.g. my_driver.py)") in result.stderr


def test_the_guard_reads_the_variables_agents_set_on_every_process():
    assert job_process_marker({}) is None
    assert job_process_marker({contract.TRAINPLANE_WORLD_FILE: "/run/w.json"}) == contract.TRAINPLANE_WORLD_FILE
    assert job_process_marker({contract.TRAINPLANE_GENERATION: "3"}) == contract.TRAINPLANE_GENERATION
    refuse_inside_job("LocalCompute()", {contract.TOKEN: "agent settings are not a job process"})
    with pytest.raises(NestedJobError, match=r"^\.to\(X\) was called inside rank 5 of job j1 \(TRAINPLANE_GENERATION"):
        refuse_inside_job("X", {contract.TRAINPLANE_GENERATION: "1", contract.RANK: "5",
                                contract.TORCHELASTIC_RUN_ID: "j1"})


def test_a_job_process_sees_the_markers_and_is_refused_to_deploy():
    """Inside a real job's processes, the variables the guard reads are set (by the agent itself)."""
    with fn(service_fns.environment).to(LocalCompute(workers=1, num_proc=2, grace_period=1.0)) as environment:
        seen = environment([contract.TRAINPLANE_WORLD_FILE, contract.TRAINPLANE_GENERATION])

    assert [sorted(s) for s in seen] == [sorted([contract.TRAINPLANE_WORLD_FILE, contract.TRAINPLANE_GENERATION])] * 2
    assert all(job_process_marker(s) for s in seen)
