"""The bootstrap's parent-death check with real processes: a rank of an agent that is pid 1 (a container's
entrypoint, in its own pid namespace) runs, and a rank whose agent is not its parent any more exits at once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.agent import contract
from tests.conftest import ROOT

pytestmark = pytest.mark.process

AGENT_AS_PID_1 = """
import os, sys, threading
from runtime.agent.execution.procs import LocalProcesses
assert os.getpid() == 1, os.getpid()
exits, done = [], threading.Event()
procs = LocalProcesses(generation=1, first_rank=0, envs=[dict(os.environ)], entrypoint=[sys.argv[1]],
                       on_exit=lambda e: (exits.append(e), done.set()), python=sys.executable)
procs.start()
assert done.wait(60)
procs.stop(1.0)
print("exit codes", [e.exit_code for e in exits], flush=True)
"""


def test_a_rank_of_an_agent_that_is_pid_1_runs_its_code(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text("print('rank ran', flush=True)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(["unshare", "--pid", "--fork", sys.executable, "-c", AGENT_AS_PID_1, str(script)],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[rank 0] rank ran", "exit codes [0]"], (done.stdout, done.stderr)


def test_a_rank_whose_agent_is_no_longer_its_parent_exits_137_before_its_code(tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    script = tmp_path / "job.py"
    script.write_text(f"open({str(ran)!r}, 'w').close()\n")
    # pid 1 is never this test's pid: the bootstrap's parent is not the agent it was told of
    env = {**os.environ, "PYTHONPATH": str(ROOT), contract.PARENT_PID: "1"}
    done = subprocess.run([sys.executable, "-m", "runtime.agent.execution.bootstrap", str(script)],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 137, done.stderr
    assert not ran.exists()
