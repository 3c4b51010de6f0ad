"""Every message between agents names its job as well as carrying its token: another job's is refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from runtime.agent import contract
from runtime.agent.errors import TransportError, WrongJob
from runtime.agent.net.transport import request_json
from tests.conftest import ROOT, AgentCluster, project_env, wait_until

pytestmark = pytest.mark.process


def test_an_agent_of_another_job_with_the_same_token_is_refused_not_merged(tmp_path: Path):
    """Job A waits for its second node; an agent of another job that holds the same token (a reused
    Secret, a copied environment) and points at A's coordinator is refused with 403 and exits 3,
    instead of completing A's world."""
    job = AgentCluster(tmp_path, ["-c", "pass"], workers=1, TRAINPLANE_WORKERS="2")
    try:
        assert wait_until(lambda: waiting(job), timeout=30)
        stray = subprocess.run(
            [sys.executable, "-m", "runtime.agent"], cwd=ROOT, capture_output=True, text=True, timeout=60,
            env=project_env(**{**job.settings, contract.JOB_NAME: "another-job", contract.NODE_RANK_SETTING: "1",
                               contract.ADVERTISE_ADDRESS: job.address(1)}),
        )
        assert stray.returncode == contract.EXIT_RENDEZVOUS
        assert f"403 this agent serves job {job.job!r}, not 'another-job'" in stray.stderr
        members = job.members()
        assert members["status"] == "forming" and 1 not in members["registered"]
    finally:
        job.close()


def test_a_request_naming_another_job_is_refused_with_the_right_token(tmp_path: Path):
    job = AgentCluster(tmp_path, ["-c", "pass"], workers=1, TRAINPLANE_WORKERS="2")
    try:
        assert wait_until(lambda: waiting(job), timeout=30)
        with pytest.raises(WrongJob, match="403 this agent serves job"):
            request_json(job.address(0), job.port, "GET", contract.ROUTE_MEMBERS, job.token, job="another-job")
    finally:
        job.close()


def waiting(job: AgentCluster) -> bool:
    """Whether the job's coordinator answers and is still forming the world."""
    try:
        return job.members()["status"] == "forming"
    except TransportError:
        return False
