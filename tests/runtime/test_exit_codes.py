"""The launcher's exit codes against a rank's: a rank's 2 or 3 is passed through, and the last line
says whose a non-zero code is."""

from __future__ import annotations

import subprocess
import sys

import pytest

from runtime.agent import contract
from tests.conftest import ROOT, launch, project_env
from tests.runtime.test_launch import QUORUM_DRIVER

pytestmark = pytest.mark.process


@pytest.mark.parametrize("code", [contract.EXIT_USAGE, contract.EXIT_RENDEZVOUS, 5])
def test_a_ranks_exit_code_is_passed_through_and_the_last_line_says_it_is_the_ranks(script, code: int):
    path = script(f"import os, sys\nsys.exit({code} if os.environ['RANK'] == '1' else 0)\n")
    result = launch("--nnodes", "2", str(path))
    assert result.returncode == code, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"[trainplane] exit code {code}: rank 1's own exit code (node 1 at 127.0.0.3), passed through (not the "
        f"launcher's)")


def test_a_world_that_never_formed_ends_with_the_launchers_own_3(script):
    path = script("print('never runs')\n")
    result = subprocess.run([sys.executable, "-c", QUORUM_DRIVER, "--workers", "2", "--quorum-timeout", "1.5",
                             str(path)], cwd=ROOT, env=project_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == contract.EXIT_RENDEZVOUS, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "[trainplane] exit code 3: the launcher's own: quorum not met after 1.5 s: 1 node(s) registered, 2 needed")


def test_a_job_that_succeeds_prints_no_exit_line(script):
    result = launch("--nnodes", "2", str(script("print('ok')\n")))
    assert result.returncode == 0, result.stderr
    assert "exit code" not in result.stderr


def test_a_fixed_size_job_that_loses_a_node_ends_with_the_launchers_own_1(script):
    """Rank 1 kills its own agent (SIGKILL: no verdict, no failing process): the coordinator finds
    node 1 gone and fails the job, and the launcher calls 1 its own code."""
    path = script("import os, signal, time\nif os.environ['RANK'] == '1':\n    os.kill(os.getppid(), signal.SIGKILL)\n"
                  "time.sleep(60)\n")
    result = launch("--nnodes", "2", "--master-port", "0", "--grace-period", "1", str(path))
    assert result.returncode == contract.EXIT_NODE_LOST == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("[trainplane] exit code 1: the launcher's own: node 1 (127.0.0.3) "), last
