"""active_deadline_seconds reaches the agents as their own time limit, a margin earlier, so the report
of the ranks still running is printed before Kubernetes kills the pods."""

from __future__ import annotations

import pytest

from components.job.pod import DEADLINE_REPORT_MARGIN
from runtime.agent import contract
from tests.components.job.test_job_builders import env_of, render, templates


@pytest.mark.parametrize(("deadline", "timeout"), [(3600, 3600 - DEADLINE_REPORT_MARGIN), (40, 20)])
def test_the_agents_time_limit_comes_before_the_jobs_deadline(deadline: int, timeout: float):
    env = env_of(templates(render(active_deadline_seconds=deadline, quorum_timeout=10))[0])
    assert float(env[contract.TIMEOUT]) == timeout


def test_without_a_deadline_the_agents_have_no_time_limit():
    assert contract.TIMEOUT not in env_of(templates(render())[0])
