"""The rules the workloads' rendering relies on, checked against the real API server and controllers (issue 21):
which Job fields a ``pulumi up`` may patch in place, an elastic Indexed Job completing with fewer nodes than
it started, and a service job's PodDisruptionBudget letting a drain take one pod at a time (the eviction API, and
``kubectl drain`` itself).

The objects are ``render_job``'s, created as they are (``tests.cluster.test_workloads.deploy``); kwok marks
pods Running and Ready once bound and a Job's pods Succeeded a few seconds later.
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from components.job.render import JOB_IMMUTABLE
from testbed.cluster import nodes
from testbed.cluster.lifecycle import Cluster
from testbed.cluster.waiting import wait_for
from tests.cluster.kube import WAIT, create, pods, wait_for_pods
from tests.cluster.test_workloads import deploy, selector

pytestmark = pytest.mark.cluster

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


def patch_job(api: client.ApiClient, namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A merge patch of the Job's spec, as the API server stores it."""
    patched = client.BatchV1Api(api).patch_namespaced_job(name, namespace, {"spec": spec})
    return dict(api.sanitize_for_serialization(patched))


def test_a_jobs_deadline_and_ttl_are_patched_in_place_and_its_immutable_fields_refused(
        api: client.ApiClient, namespace: str) -> None:
    """k8s.io/kubernetes v1.34.4 as it runs: ``activeDeadlineSeconds`` and ``ttlSecondsAfterFinished`` change
    on the running Job (same UID), so ``components/job/render.py`` patches them instead of replacing the Job
    and restarting training; a change to a field of ``JOB_IMMUTABLE`` is refused as immutable, so those
    replace it."""
    rendered, stored = deploy(api, namespace, workers=2, min_workers=1, max_workers=2,
                              active_deadline_seconds=3600, ttl_seconds_after_finished=600)
    name, uid = rendered.names.job, stored["indexed-job"]["metadata"]["uid"]

    patched = patch_job(api, namespace, name, {"activeDeadlineSeconds": 7200, "ttlSecondsAfterFinished": 60})
    assert (patched["metadata"]["uid"], patched["spec"]["activeDeadlineSeconds"],
            patched["spec"]["ttlSecondsAfterFinished"]) == (uid, 7200, 60)
    assert "spec.activeDeadlineSeconds" not in JOB_IMMUTABLE and "spec.ttlSecondsAfterFinished" not in JOB_IMMUTABLE

    for field, value in (("successPolicy", {"rules": [{"succeededCount": 2}]}), ("completionMode", "NonIndexed"),
                         ("podFailurePolicy", {"rules": []})):
        assert f"spec.{field}" in JOB_IMMUTABLE
        with pytest.raises(ApiException) as refused:
            patch_job(api, namespace, name, {field: value})
        assert refused.value.status == 422 and "immutable" in str(refused.value.body), (field, refused.value.body)


def refuse_index(api: client.ApiClient, namespace: str, index: str) -> None:
    """A ValidatingAdmissionPolicy refusing, in ``namespace``, every pod of completion index ``index``: that
    node of the job never gets a pod, as when its replacement finds no room."""
    name = f"{namespace}-no-index-{index}"
    create(api, {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                                    "resources": ["pods"]}]},
            "validations": [{"expression": f"!has(object.metadata.annotations) || !('{COMPLETION_INDEX}' in "
                                           f"object.metadata.annotations) || "
                                           f"object.metadata.annotations['{COMPLETION_INDEX}'] != '{index}'",
                             "message": f"index {index} gets no pod in this test"}],
        },
    })
    create(api, {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}},
    })


def test_an_elastic_job_that_never_got_one_of_its_nodes_completes_with_the_others(
        api: client.ApiClient, namespace: str) -> None:
    """k8s.io/kubernetes v1.34.4's Job controller with the rendered ``successPolicy`` (``succeededCount`` =
    ``min_workers``): index 2 of a 3-node elastic job never gets a pod, indexes 0 and 1 succeed, and the Job
    is ``Complete`` (``SuccessCriteriaMet`` first). Without the policy it would stay active, waiting for
    index 2."""
    admission = client.AdmissionregistrationV1Api(api)
    refuse_index(api, namespace, "2")
    try:
        def refusing() -> bool:  # the policy is in force once a pod of index 2 is refused
            probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": "probe", "namespace": namespace, "annotations": {COMPLETION_INDEX: "2"}},
                "spec": {"containers": [{"name": "c", "image": "none"}]}}
            try:
                client.CoreV1Api(api).create_namespaced_pod(namespace, probe, dry_run="All")
            except ApiException as refused:
                return refused.status in (400, 403, 422)
            return False

        wait_for(refusing, WAIT, "the admission policy to refuse index 2")
        rendered, _ = deploy(api, namespace, workers=3, min_workers=2, max_workers=3)
        batch = client.BatchV1Api(api)

        def complete() -> client.V1Job | None:
            job = batch.read_namespaced_job(rendered.names.job, namespace)
            types = {c.type for c in job.status.conditions or [] if c.status == "True"}
            return job if {"SuccessCriteriaMet", "Complete"} <= types else None

        job = wait_for(complete, WAIT, "the elastic Job to complete with two of its three nodes")
        assert job.status.succeeded == 2
        assert job.status.completed_indexes == "0,1"
        assert all(p.metadata.annotations[COMPLETION_INDEX] != "2" for p in pods(api, namespace, selector(rendered)))
    finally:
        name = f"{namespace}-no-index-2"
        admission.delete_validating_admission_policy_binding(name)
        admission.delete_validating_admission_policy(name)


def evict(api: client.ApiClient, namespace: str, pod: str) -> int:
    """Ask the eviction API (what ``kubectl drain`` uses) to evict ``pod``; the HTTP status of the answer."""
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": namespace}}
    try:
        client.CoreV1Api(api).create_namespaced_pod_eviction(pod, namespace, body)
    except ApiException as refused:
        return int(refused.status)
    return 201


def test_a_service_jobs_pods_can_be_evicted_one_at_a_time(api: client.ApiClient, namespace: str) -> None:
    """k8s.io/kubernetes v1.34.4's eviction API and disruption controller with the rendered PodDisruptionBudget
    of a fixed-size 3-node service job (quorum = every node): one pod is evicted, a second at the same time
    is refused (429, the budget), and once the StatefulSet's replacement is Ready the next one can go, as a
    ``kubectl drain`` of one node after another does. With ``minAvailable`` = replicas every eviction was
    refused."""
    rendered, stored = deploy(api, namespace, mode="service", workers=3)
    assert stored["pdb"]["spec"]["minAvailable"] == 2
    wait_for_pods(api, namespace, selector(rendered), 3)
    policy = client.PolicyV1Api(api)

    def allowed(count: int) -> bool:
        status = policy.read_namespaced_pod_disruption_budget(rendered.names.job, namespace).status
        return status is not None and status.current_healthy == 3 and status.disruptions_allowed == count

    wait_for(lambda: allowed(1), WAIT, "the budget to allow one disruption")
    first, second, third = (f"{rendered.names.job}-{i}" for i in range(3))
    assert evict(api, namespace, first) == 201
    assert evict(api, namespace, second) == 429, "a second pod at the same time is refused"

    def replaced() -> bool:
        pod = client.CoreV1Api(api).read_namespaced_pod(first, namespace)
        return pod.metadata.deletion_timestamp is None and allowed(1)

    wait_for(replaced, WAIT, "the evicted pod's replacement to be Ready")
    assert evict(api, namespace, third) == 201


def test_kubectl_drain_of_the_node_running_a_service_job_takes_its_pods_one_at_a_time(
        api: client.ApiClient, namespace: str, cluster: Cluster) -> None:
    """``kubectl drain`` (the machine's kubectl) of the node holding all three pods of a fixed-size service job
    takes them one at a time: k8s.io/kubectl's ``pkg/drain/drain.go`` (``evictPods``) cordons the node, asks the
    eviction API for every pod at once and retries a refused one after 5 s; the API server (k8s.io/kubernetes
    v1.34.4 ``pkg/registry/core/pod/storage/eviction.go``) lets one go under the rendered budget
    (``minAvailable: 2``) and refuses the others, "Cannot evict pod as it would violate the pod's disruption
    budget", until the StatefulSet's replacement is Ready elsewhere. The other node stays cordoned until the
    first refusal is printed, so no replacement can be Ready before it (with both nodes open, kwok's instant
    replacements can free the budget between kubectl's requests and no refusal need appear); then it opens and
    the drain ends with all three pods there. The job has a name of its own, so the drain's selector takes no
    other test's pods. ``--delete-emptydir-data``: kubectl refuses to drain pods with an emptyDir without it,
    and every job pod has one (``/dev/shm``)."""
    core = client.CoreV1Api(api)
    target, other = nodes.CPU_NODES
    core.patch_node(other, {"spec": {"unschedulable": True}})
    try:
        rendered, stored = deploy(api, namespace, name="drained", mode="service", workers=3)
        assert stored["pdb"]["spec"]["minAvailable"] == 2
        found = wait_for_pods(api, namespace, selector(rendered), 3)
        assert {p.spec.node_name for p in found} == {target}
        budget = client.PolicyV1Api(api)
        wait_for(lambda: budget.read_namespaced_pod_disruption_budget(
            rendered.names.job, namespace).status.disruptions_allowed == 1, WAIT, "the budget to allow one disruption")
        drain = subprocess.Popen(["kubectl", f"--kubeconfig={cluster.kubeconfig}", "drain", target,
                                  f"--pod-selector={selector(rendered)}", "--delete-emptydir-data", "--timeout=240s"],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert drain.stdout is not None
        lines: list[str] = []
        for line in drain.stdout:
            lines.append(line)
            if "Cannot evict pod as it would violate the pod's disruption budget" in line:
                break
        refused = "".join(lines)
        assert "Cannot evict pod as it would violate the pod's disruption budget" in refused, refused
        core.patch_node(other, {"spec": {"unschedulable": False}})
        out = refused + drain.stdout.read()
        assert drain.wait(timeout=300) == 0, out
        assert all(f"pod/{rendered.names.job}-{i} evicted" in out for i in range(3)), out
        moved = wait_for_pods(api, namespace, selector(rendered), 3)
        assert {p.spec.node_name for p in moved} == {other}
    finally:
        for name in (target, other):
            core.patch_node(name, {"spec": {"unschedulable": False}})
