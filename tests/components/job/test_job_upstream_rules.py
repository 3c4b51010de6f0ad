"""Upstream rules: how the rendered workloads behave on a real cluster (awaiting, failing, restarting,
time limits, grace periods, replacing)."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.agent import contract
from tests.components.job.jobrender import (
    env_of,
    render,
    templates,
    workload,
    workload_manifest_of,
)
from tests.components.schemacheck import validate_manifest

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "overrides",
    [{}, {"gang_scheduler": "volcano"}, {"backend": "pytorchjob"},
     {"backend": "pytorchjob", "gang_scheduler": "volcano"}, {"mode": "service", "gang_scheduler": "volcano"},
     {"mode": "service", "gang_scheduler": "kueue", "queue": "q"}],
    ids=["indexed-job", "indexed-job-volcano", "pytorchjob", "pytorchjob-volcano", "statefulset-volcano",
         "statefulset-kueue"],
)
def test_no_workload_skips_awaiting_its_delete(overrides: dict[str, Any]) -> None:
    """pulumi/pulumi-kubernetes v4.32.0 ``provider/pkg/metadata/overrides.go``: ``pulumi.com/skipAwait``
    also skips awaiting the delete of a ``batch/v1`` Job or an ``apps/v1`` StatefulSet
    (``allowsSkipAwaitWithDelete``); the delete is Foreground (``DeletionPropagation``) and the replacement
    is an immediate Create (``provider/pkg/await/await.go``, ``Creation``, retried only on NotFound), so
    replacing the workload on a changed image fails with ``object is being deleted: jobs.batch "<job>"
    already exists``. ``pulumi.com/waitFor`` (``ReadyCondition``) replaces the wait for completion or
    readiness and leaves the delete awaited."""
    manifest = workload_manifest_of(render(**overrides))
    annotations = manifest.body["metadata"].get("annotations", {})
    assert "pulumi.com/skipAwait" not in annotations
    assert annotations == {"pulumi.com/waitFor": "jsonpath={.metadata.uid}"}


def test_a_plain_service_job_is_awaited_until_ready() -> None:
    """pulumi-kubernetes' StatefulSet await logic waits for every replica to be ready; a ``waitFor``
    would replace it (``provider/pkg/await/await.go``: built-in logic only ``if !custom``)."""
    assert "annotations" not in workload(render(mode="service"))["metadata"]


def test_a_fixed_size_indexed_job_fails_on_its_first_failed_pod() -> None:
    """Kubernetes ``batch/v1`` JobSpec (k8s.io/api): a failed pod that no pod failure policy rule
    ignores increments ``status.failed``, checked against ``backoffLimit``; the Job fails when it is
    exceeded. ``Ignore`` (here ``DisruptionTarget``: preemption, eviction, drain) creates a replacement
    without counting. With ``backoffLimit: 0`` a fixed-size job's first crashed agent fails it."""
    spec = workload(render(workers=3))["spec"]
    assert spec["backoffLimit"] == 0
    assert spec["podFailurePolicy"]["rules"] == [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]
    assert spec["template"]["spec"]["restartPolicy"] == "Never"


@pytest.mark.parametrize(("backoff_limit", "expected"), [(None, 3), (7, 7), (0, 0)])
def test_an_elastic_indexed_job_replaces_a_lost_pod(backoff_limit: Any, expected: int) -> None:
    """Kubernetes ``batch/v1`` JobSpec: while ``status.failed`` stays within ``backoffLimit`` the Job
    controller creates a replacement pod for a failed index (``podReplacementPolicy: Failed``: once the old
    one is fully terminated), which rejoins the running world under its index. An elastic job
    therefore gets a ``backoffLimit`` of ``backoff_limit`` (3 by default)."""
    spec = workload(render(workers=3, min_workers=2, max_workers=3, backoff_limit=backoff_limit))["spec"]
    assert (spec["backoffLimit"], spec["podReplacementPolicy"]) == (expected, "Failed")
    assert spec["template"]["spec"]["restartPolicy"] == "Never"


@pytest.mark.parametrize(("overrides", "count"), [
    ({"min_workers": 2, "max_workers": 3}, 2),
    ({"min_workers": 1, "max_workers": 3}, 1),
    ({"min_workers": 1, "max_workers": 3, "quorum_workers": 2}, 1),
])
def test_an_elastic_indexed_job_completes_once_its_smallest_world_has_succeeded(overrides: dict[str, Any],
                                                                               count: int) -> None:
    """k8s.io/api v0.34.4 ``batch/v1/types.go`` (``SuccessPolicy``, ``SuccessPolicyRule``): without rules a Job
    completes when ``status.succeeded`` reaches ``completions``; a ``succeededCount`` rule declares it succeeded
    once that many indexes have, and the lingering pods are removed. An elastic job may end with fewer nodes than
    ``workers`` (a lost index's replacement never ran), and its agents exit 0 only with the job's verdict of
    success, reached with at least the smallest world (``min_workers``: the quorum only gates the first one)."""
    spec = workload(render(workers=3, **overrides))["spec"]
    assert spec["successPolicy"] == {"rules": [{"succeededCount": count}]}
    assert count <= spec["completions"], "the API server refuses a count above completions"


def test_a_fixed_size_indexed_job_needs_every_index() -> None:
    """A fixed-size world has every node: the default (every index succeeded) is the job's own rule."""
    assert "successPolicy" not in workload(render(workers=3))["spec"]


@pytest.mark.parametrize(("overrides", "min_available"), [
    ({"workers": 3}, 2),
    ({"workers": 1}, 0),
    ({"workers": 4, "quorum_workers": 2, "min_workers": 2, "max_workers": 4}, 2),
    ({"workers": 3, "min_workers": 3, "max_workers": 5}, 2),
])
def test_a_service_jobs_disruption_budget_lets_one_pod_at_a_time_go(overrides: dict[str, Any],
                                                                    min_available: int) -> None:
    """k8s.io/api v0.34.4 ``policy/v1/types.go`` (``PodDisruptionBudgetSpec``): an eviction is allowed only if
    ``minAvailable`` pods stay available without the evicted one, so ``minAvailable == replicas`` blocks every
    drain; ``AlwaysAllow`` lets a running pod that is not Ready be evicted whatever the budget."""
    (pdb,) = [m.body for m in render(mode="service", **overrides).manifests if m.body["kind"] == "PodDisruptionBudget"]
    assert pdb["spec"]["minAvailable"] == min_available
    assert pdb["spec"]["minAvailable"] < overrides["workers"]
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    validate_manifest(pdb)


def test_a_fixed_size_pytorchjob_fails_when_a_pod_fails() -> None:
    """kubeflow/trainer v1.9.4 ``pkg/controller.v1/pytorch/pytorchjob_controller.go`` (``UpdateJobStatus``):
    ``failed > 0`` with a replica ``restartPolicy`` of ``Never`` marks the whole job Failed."""
    spec = workload(render(backend="pytorchjob", workers=3))["spec"]
    assert {r["restartPolicy"] for r in spec["pytorchReplicaSpecs"].values()} == {"Never"}
    assert spec["runPolicy"]["backoffLimit"] == 0


def test_an_elastic_pytorchjob_restarts_a_failed_agent_instead_of_failing() -> None:
    """kubeflow/trainer v1.9.4 ``pkg/controller.v1/pytorch/pytorchjob_controller.go``: a replica whose
    ``restartPolicy`` is not ``Never`` is restarted, not failed; under ``OnFailure`` the kubelet restarts
    the container in its pod (the pod never reaches Failed), and ``pkg/core/job.go`` (``PastBackoffLimit``)
    fails the job once the containers' restarts reach ``runPolicy.backoffLimit``. The replica's policy
    overrides the pod template's, which the operator warns about when set (``pkg/controller.v1/common/
    pod.go``, ``SetPodTemplateRestartPolicy``), so the template leaves it unset."""
    spec = workload(render(backend="pytorchjob", workers=2, min_workers=1, max_workers=4, backoff_limit=5))["spec"]
    (worker,) = spec["pytorchReplicaSpecs"].values()
    assert worker["restartPolicy"] == "OnFailure"
    assert "restartPolicy" not in worker["template"]["spec"]
    assert spec["runPolicy"]["backoffLimit"] == 5


@pytest.mark.parametrize(
    ("overrides", "path", "field"),
    [({}, ("spec",), "activeDeadlineSeconds"), ({"backend": "pytorchjob"}, ("spec", "runPolicy"),
                                                  "activeDeadlineSeconds")],
    ids=["indexed-job", "pytorchjob"],
)
def test_the_job_level_time_limit_is_rendered_where_the_workload_takes_it(overrides, path, field) -> None:
    """Kubernetes ``batch/v1`` JobSpec ``activeDeadlineSeconds`` (the Job controller fails the Job with
    ``DeadlineExceeded``); kubeflow/trainer v1.9.4 ``RunPolicy.activeDeadlineSeconds`` (the operator fails
    the job past it, ``pkg/controller.v1/common/job.go``)."""
    node = workload(render(active_deadline_seconds=3600, **overrides))
    for key in path:
        node = node[key]
    assert node[field] == 3600


def test_pods_stop_within_a_grace_period_that_covers_the_agents() -> None:
    """Kubernetes sends SIGTERM and kills the pod ``terminationGracePeriodSeconds`` later (30 s when
    unset); the agent gives its processes ``TRAINPLANE_GRACE_PERIOD`` between SIGTERM and SIGKILL
    (``runtime.agent.spec.agent_settings``), so a rank's checkpoint-on-SIGTERM needs both to cover it."""
    for template in templates(render(grace_period=45)):
        assert env_of(template)[contract.GRACE_PERIOD] == "45"
        assert template["spec"]["terminationGracePeriodSeconds"] == 55
    default = templates(render())[0]
    assert env_of(default)[contract.GRACE_PERIOD] == "5"
    assert default["spec"]["terminationGracePeriodSeconds"] == 15


def test_resizing_an_elastic_service_job_changes_replicas_not_its_pod_template() -> None:
    """Kubernetes ``apps/v1`` StatefulSet: any change to ``spec.template`` is a rolling update of every
    pod; a change of ``replicas`` only adds or removes pods. An elastic service job's size settings come
    from a ConfigMap (read when each pod starts), so new pods join the running world."""
    small = render(mode="service", workers=2, min_workers=1, max_workers=4)
    large = render(mode="service", workers=3, min_workers=1, max_workers=4)
    assert workload(small)["spec"]["template"] == workload(large)["spec"]["template"]
    assert (workload(small)["spec"]["replicas"], workload(large)["spec"]["replicas"]) == (2, 3)
    size = next(m.body for m in large.manifests if m.role == "size")
    assert size["data"] == {contract.WORKERS: "3", contract.QUORUM_WORKERS: "3"}
    validate_manifest(size)
    env = env_of(workload(large)["spec"]["template"])
    assert env[contract.WORKERS] == {"configMapKeyRef": {"name": "demo-size", "key": contract.WORKERS}}
    assert env[contract.QUORUM_WORKERS] == {"configMapKeyRef": {"name": "demo-size", "key": contract.QUORUM_WORKERS}}
    assert "size" not in {m.role for m in render(mode="service", workers=3).manifests}, "fixed size: no ConfigMap"


def test_a_kueue_service_job_is_replaced_rather_than_patched() -> None:
    """kubernetes-sigs/kueue v0.19.2 ``pkg/controller/jobs/statefulset/statefulset_webhook.go``
    (``ValidateUpdate``): while Kueue manages a StatefulSet, ``replicas`` may change only to or from 0 and
    the pod shape (``ValidateImmutablePodGroupPodSpec``: requests, ports, node selector, tolerations) not
    at all, so trainplane replaces it (deleting first) and Kueue admits the new one."""
    manifest = workload_manifest_of(render(mode="service", gang_scheduler="kueue", queue="team-a"))
    assert manifest.replace_on == ("spec",)
    assert workload_manifest_of(render(mode="service")).replace_on == ()


def test_a_jobs_local_queue_is_replaced_when_its_cluster_queue_changes() -> None:
    """kubernetes-sigs/kueue v0.19.2 ``config/components/crd/bases/kueue.x-k8s.io_localqueues.yaml``:
    ``spec.clusterQueue`` is immutable (``x-kubernetes-validations: self == oldSelf``)."""
    (queue,) = [m for m in render(gang_scheduler="kueue", cluster_queue="gpu-pool").manifests if m.role == "localqueue"]
    assert queue.replace_on == ("spec.clusterQueue",)
