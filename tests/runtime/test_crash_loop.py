"""A node that keeps failing cannot keep an elastic job running forever: its failures are budgeted by
``--max-restarts`` (as torchrun counts them), its re-admission backs off, and the job then fails with
the root cause. It used to loop fail, re-admit, fail: generation 408 after ten minutes."""

from __future__ import annotations

import pytest

from tests.conftest import launch

pytestmark = pytest.mark.process

FAILS_ON_RANK_1 = """
import os, sys, time
import runtime
if os.environ["RANK"] == "1":
    sys.exit(5)
while True:  # rank 0 trains on, through every change, until the job ends
    try:
        time.sleep(60)
    except runtime.WorkerMembershipChanged:
        pass
"""


def test_a_crash_looping_node_fails_the_elastic_job_once_its_budget_is_spent(script):
    result = launch("--nnodes", "1:2", "--max-restarts", "1", str(script(FAILS_ON_RANK_1)), timeout=120)
    assert result.returncode == 5, result.stderr
    assert result.stderr.count("exited with code 5") >= 2
    assert "registering again in 6 s" in result.stderr, "the first re-admission waits two TTLs"
    assert "node 1's processes failed 2 time(s), past its budget (max_restarts 1); the last: rank 1" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("[trainplane] exit code 5: rank 1's own exit code")


def test_without_restarts_an_elastic_jobs_failing_rank_fails_it_at_once(script):
    result = launch("--nnodes", "1:2", str(script(FAILS_ON_RANK_1)), timeout=60)
    assert result.returncode == 5, result.stderr
    assert "generation 3" not in result.stderr
