"""What the rendered agents need for the faults of issue 12: active_deadline_seconds reaches them as
their own time limit, a margin earlier, so the report of the ranks still running is printed before
Kubernetes kills the pods; and every index's pod name, so a replaced pod finds the coordinator."""

from __future__ import annotations

import pytest

from components.job.pod import DEADLINE_REPORT_MARGIN
from runtime.agent import contract
from tests.components.job.jobrender import env_of, render, templates, workload
from tests.components.job.test_job_component import run_job
from tests.components.schemacheck import validate_manifest

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("deadline", "timeout"), [(3600, 3600 - DEADLINE_REPORT_MARGIN), (40, 20)])
def test_the_agents_time_limit_comes_before_the_jobs_deadline(deadline: int, timeout: float):
    env = env_of(templates(render(active_deadline_seconds=deadline, quorum_timeout=10))[0])
    assert float(env[contract.TIMEOUT]) == timeout


def test_without_a_deadline_the_agents_have_no_time_limit():
    assert contract.TIMEOUT not in env_of(templates(render())[0])


def test_pods_named_by_index_are_given_every_indexs_name_to_find_the_coordinator_by():
    """A replaced pod asks the other indices' agents, not only <job>-0, which may be gone or no longer
    coordinate (runtime.agent.rendezvous.discovery)."""
    for overrides in ({}, {"mode": "service"}):
        assert env_of(templates(render(**overrides))[0])[contract.PEERS] == "demo-{index}.demo"
    assert contract.PEERS not in env_of(templates(render(backend="pytorchjob"))[0])


def test_an_elastic_pytorchjobs_workers_are_given_every_replicas_service_name():
    """The training operator names replica ``i`` of an elastic (Worker-only) PyTorchJob, and its
    headless Service, ``<job>-worker-<i>`` (kubeflow/training-operator v1.8,
    ``pkg/controller.v1/common/service.go``, ``CreateNewService``: ``ClusterIP: "None"``, name
    ``GenGeneralName(job, rt, index)``), so the name resolves to the pod and reaches its agent port."""
    env = env_of(templates(render(backend="pytorchjob", workers=3, min_workers=2, max_workers=4))[0])
    assert env[contract.PEERS] == "demo-worker-{index}"


def test_an_elastic_indexed_job_fails_at_once_when_its_agents_say_the_job_failed_for_good():
    """kubernetes/kubernetes ``pkg/controller/job/pod_failure_policy.go`` (``matchPodFailurePolicy``):
    rules are tried in order, the first match decides; an ``onExitCodes`` rule matches a terminated
    container (``containerName``, when given) whose non-zero exit code is ``In`` the values, and
    ``FailJob`` fails the Job instead of counting the pod toward ``backoffLimit`` and replacing it. The
    agents exit ``EXIT_JOB_FAILED`` once an elastic job has failed for good (runtime.agent.rendezvous
    .member); a fixed-size job has ``backoffLimit: 0`` and needs no such rule."""
    validate_manifest(workload(render(workers=3, min_workers=2, max_workers=3)))
    spec = run_job(workers=3, min_workers=2, max_workers=3).one("kubernetes:batch/v1:Job").inputs["spec"]
    rules = spec["podFailurePolicy"]["rules"]
    assert rules[0]["onPodConditions"] == [{"type": "DisruptionTarget", "status": "True"}]
    assert rules[1] == {"action": "FailJob", "onExitCodes": {
        "containerName": "agent", "operator": "In", "values": [contract.EXIT_JOB_FAILED]}}
    assert spec["template"]["spec"]["containers"][0]["name"] == "agent"
    assert len(workload(render(workers=3))["spec"]["podFailurePolicy"]["rules"]) == 1
