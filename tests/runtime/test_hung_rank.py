"""A hung rank is reported, and the job's time limit ends the job with the report and exit code 124:
a rank that sleeps forever while the others finish used to hang the job silently."""

from __future__ import annotations

import pytest

from runtime.agent import contract
from tests.conftest import launch

pytestmark = pytest.mark.process

HANGS_ON_RANK_1 = """
import os, time
if os.environ["RANK"] == "1":
    print("rank 1 hangs", flush=True)
    time.sleep(600)
"""


@pytest.mark.parametrize(("nodes", "procs", "where"),
                         [("2", "1", "node 1 (127.0.0.3)"), ("1", "2", "node 0 (127.0.0.2)")])
def test_a_hung_rank_is_named_and_the_time_limit_ends_the_job_with_124(script, nodes: str, procs: str, where: str):
    result = launch("--nnodes", nodes, "--nproc-per-node", procs, "--hang-report-after", "2", "--timeout", "10",
                    str(script(HANGS_ON_RANK_1)), timeout=120)
    assert result.returncode == contract.EXIT_TIMEOUT, result.stderr
    assert f"straggling after rank 0 finished: rank 1 on {where}: running, no output for" in result.stderr
    assert f"job failed: time limit of 10 s reached; still running: rank 1 on {where}" in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "[trainplane] exit code 124: the launcher's own: time limit of 10 s reached (--timeout)")
