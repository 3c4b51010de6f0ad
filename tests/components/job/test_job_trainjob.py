"""``backend="trainjob"``: the TrainJob and trainplane's ClusterTrainingRuntimes, schema-valid against the CRDs of
Kubeflow Trainer v2.3.0 and JobSet v0.12.0 (``../shared/schemas``), the JobSet the Trainer makes of them valid
against JobSet's, and the objects trainplane leaves to the Trainer, JobSet and Kueue left out."""

from __future__ import annotations

import re
from typing import Any

import kubernetes_validate
import pytest

from components.addons.trainer_runtime import RUNTIME_NAMES, TERMINATION_GRACE_SECONDS, cluster_training_runtime
from components.job.render import RenderedJob
from components.job.trainjob import RUNTIME_PATCH_MANAGER, VOLCANO_QUEUE_ANNOTATION
from components.job.workloads import DISRUPTION_IGNORED
from runtime.agent import contract
from tests.components.job.jobrender import FULL, kind_of, render
from tests.components.job.trainermerge import jobset_of, node_pod
from tests.components.schemacheck import KUBERNETES_VERSION, validate_manifest

pytestmark = pytest.mark.unit

TRAINJOB_FULL = {k: v for k, v in FULL.items()
                 if k not in ("service_account", "working_dir", "image_pull_policy")} | {"backend": "trainjob"}
"""Every field a TrainJob carries (``components.job.trainjob_rules`` refuses the three left out)."""
GANGS = {
    "none": {},
    "volcano": {"gang_scheduler": "volcano", "queue": "research"},
    "scheduler-plugins": {"gang_scheduler": "scheduler-plugins"},
    "kueue": {"gang_scheduler": "kueue", "queue": "team-a"},
}
DOMAIN_PREFIXED_PATH = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
                                  r"/[A-Za-z0-9/\-._~%!$&'()*+,;=:]+$")
"""``validation.IsDomainPrefixedPath`` (k8s.io/apimachinery ``pkg/util/validation/validation.go``: a DNS-1123
subdomain, ``/``, then RFC 3986 path characters ``httpPathFmt``), which the Trainer's webhook
runs on every runtime patch's ``manager`` (kubeflow/trainer v2.3.0
``pkg/runtime/framework/plugins/jobset/jobset.go``)."""


def trainjob(job: RenderedJob) -> dict[str, Any]:
    return kind_of(job, "TrainJob")


def runtime_for(gang: str) -> dict[str, Any]:
    return cluster_training_runtime("none" if gang == "kueue" else gang, {contract.LABEL_PART_OF: "trainplane"})


@pytest.mark.parametrize("gang", sorted(GANGS))
def test_the_trainjob_the_runtime_and_the_jobset_they_make_match_the_published_crds(gang: str) -> None:
    """TrainJob and ClusterTrainingRuntime against kubeflow/trainer v2.3.0
    ``manifests/base/crds/trainer.kubeflow.org_{trainjobs,clustertrainingruntimes}.yaml``; the JobSet the
    Trainer builds (``tests.components.job.trainermerge``, from ``pkg/runtime/core/trainingruntime.go`` and
    ``pkg/runtime/framework/plugins/jobset``) against kubernetes-sigs/jobset v0.12.0
    ``config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml``; its node pod as a strict core/v1 Pod. The CRDs'
    CEL rules the validator cannot run are checked by hand: the name is an RFC 1035 label of at most 63
    characters, and the patch's manager a domain-prefixed path, as the Trainer's webhook requires."""
    job = render("trainjob-demo", **TRAINJOB_FULL, **GANGS[gang])
    body = trainjob(job)
    runtime = runtime_for(gang)
    validate_manifest(body)
    validate_manifest(runtime)
    jobset = jobset_of(runtime, body)
    validate_manifest(jobset)
    pod = node_pod(jobset, 2)
    kubernetes_validate.validate({"apiVersion": "v1", "kind": "Pod", **pod}, KUBERNETES_VERSION, strict=True)
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", body["metadata"]["name"]) and len(body["metadata"]["name"]) <= 63
    assert DOMAIN_PREFIXED_PATH.match(body["spec"]["runtimePatches"][0]["manager"])
    assert DOMAIN_PREFIXED_PATH.match("kueue.x-k8s.io/manager") and not DOMAIN_PREFIXED_PATH.match("trainplane")
    assert body["spec"]["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime",
                                          "name": runtime["metadata"]["name"]}


def test_the_trainer_carries_size_processes_resources_env_and_the_entrypoint_as_args() -> None:
    """``spec.trainer`` as the Trainer reads it (kubeflow/trainer v2.3.0 ``pkg/runtime/framework/plugins/torch/
    torch.go``: ``numNodes``, ``numProcPerNode`` become ``PET_NNODES``/``PET_NPROC_PER_NODE``; ``auto`` would
    leave the count to the CPUs, so a number is always given)."""
    body = trainjob(render("demo", **TRAINJOB_FULL))
    trainer = body["spec"]["trainer"]
    assert (trainer["image"], trainer["numNodes"], trainer["numProcPerNode"]) == ("python:3.11-slim", 3, 2)
    assert trainer["resourcesPerNode"] == {"requests": {"cpu": "7500m", "memory": "60Gi"},
                                           "limits": {"memory": "60Gi", "nvidia.com/gpu": "2"}}
    assert trainer["args"] == ["train.py", "--epochs", "3"]
    env = {e["name"]: e.get("value") for e in trainer["env"]}
    assert contract.ENTRYPOINT not in env and env["NCCL_DEBUG"] == "INFO"
    assert env[contract.COORDINATOR_HOST] == "demo-node-0-0.demo"
    assert env[contract.PEERS] == "demo-node-0-{index}.demo"
    assert "activeDeadlineSeconds" not in body["spec"]
    limited = trainjob(render("demo", backend="trainjob", active_deadline_seconds=900))
    assert limited["spec"]["activeDeadlineSeconds"] == 900


def test_the_runtime_patch_labels_the_pods_for_the_network_policy_and_mounts_the_bundle() -> None:
    """The patch is strategic-merged into the runtime (``pkg/runtime/core/trainingruntime.go``,
    ``mergeRuntimePatches``): the pods get the job's labels, which its NetworkPolicy selects, the bundle digest
    annotation, the bundle and ``/dev/shm`` volumes mounted in ``node``, the node selector, tolerations (the GPU
    one included) and the grace period; the runtime's command and env stay."""
    job = render("demo", **TRAINJOB_FULL)
    body = trainjob(job)
    assert [p["manager"] for p in body["spec"]["runtimePatches"]] == [RUNTIME_PATCH_MANAGER]
    pod = node_pod(jobset_of(runtime_for("none"), body), 0)
    selector = kind_of(job, "NetworkPolicy")["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= pod["metadata"]["labels"].items()
    assert "trainplane.dev/bundle-sha256" in pod["metadata"]["annotations"]
    node = pod["spec"]["containers"][0]
    assert {m["mountPath"] for m in node["volumeMounts"]} == {contract.BUNDLE_MOUNT_PATH, "/dev/shm"}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["trainplane-runtime"]["configMap"]["name"] == "demo-runtime"
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}
    assert pod["spec"]["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {t["key"] for t in pod["spec"]["tolerations"]} == {"team", contract.GPU_TAINT_KEY}
    assert pod["spec"]["terminationGracePeriodSeconds"] == 15
    assert node["command"] == ["python3", "-m", "runtime.agent"] and node["args"] == ["train.py", "--epochs", "3"]
    assert pod["spec"]["automountServiceAccountToken"] is False and pod["spec"]["restartPolicy"] == "Never"


def test_the_grace_period_is_the_runtimes_unless_the_job_has_its_own() -> None:
    """The runtime's pods have the default grace period's ``terminationGracePeriodSeconds``, so a job with the
    default leaves it out of its patch (Kueue v0.19.2 would drop it there on admission:
    ``components.job.trainjob_rules``); a job with its own grace period patches it."""
    assert runtime_for("none")["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"][
        "spec"]["terminationGracePeriodSeconds"] == TERMINATION_GRACE_SECONDS == 15
    default = trainjob(render("demo", backend="trainjob"))
    assert "terminationGracePeriodSeconds" not in str(default["spec"]["runtimePatches"])
    assert node_pod(jobset_of(runtime_for("none"), default), 0)["spec"]["terminationGracePeriodSeconds"] == 15
    own = trainjob(render("demo", backend="trainjob", grace_period=20))
    assert node_pod(jobset_of(runtime_for("none"), own), 0)["spec"]["terminationGracePeriodSeconds"] == 30


@pytest.mark.parametrize("gang", sorted(GANGS))
def test_neither_service_nor_podgroup_is_rendered_the_trainer_and_jobset_make_them(gang: str) -> None:
    """JobSet makes the headless Service (kubernetes-sigs/jobset v0.12.0 ``pkg/controllers/jobset_controller.go``,
    named after the JobSet), the Trainer the PodGroup from its runtime's ``podGroupPolicy``
    (``pkg/runtime/framework/plugins/coscheduling/coscheduling.go``, ``.../volcano/volcano.go``), and Kueue queues
    the TrainJob by its ``kueue.x-k8s.io/queue-name`` label (kubernetes-sigs/kueue v0.19.2
    ``pkg/controller/jobs/trainjob/trainjob_controller.go``, framework ``trainer.kubeflow.org/trainjob``)."""
    job = render("demo", backend="trainjob", **GANGS[gang])
    kinds = sorted(m.body["kind"] for m in job.manifests)
    assert kinds == ["ConfigMap", "NetworkPolicy", "Secret", "TrainJob"]
    body = trainjob(job)
    labels = body["metadata"]["labels"]
    assert labels.get("kueue.x-k8s.io/queue-name") == ("team-a" if gang == "kueue" else None)
    pod = node_pod(jobset_of(runtime_for(gang), body), 0)
    assert pod["spec"].get("schedulerName") == {"volcano": "volcano",
                                                "scheduler-plugins": "scheduler-plugins-scheduler"}.get(gang)
    assert pod["metadata"]["labels"].get("scheduling.x-k8s.io/pod-group") == (
        "demo" if gang == "scheduler-plugins" else None)
    assert pod["metadata"]["annotations"].get("scheduling.k8s.io/group-name") == ("demo" if gang == "volcano" else None)
    patched = body["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]
    assert patched.get("metadata", {}).get("annotations", {}).get(VOLCANO_QUEUE_ANNOTATION) == (
        "research" if gang == "volcano" else None)
    assert runtime_for(gang)["metadata"]["name"] == RUNTIME_NAMES["none" if gang == "kueue" else gang]


def test_every_change_replaces_the_trainjob_and_pulumi_waits_only_for_its_uid() -> None:
    """Every TrainJob field is immutable (CRD rules ``self == oldSelf`` on ``runtimeRef``, ``trainer``,
    ``activeDeadlineSeconds``, ``managedBy``, each patch's ``manager``; ``runtimePatches`` change only while
    suspended, ``pkg/runtime/framework/plugins/jobset/jobset.go``), so any change replaces it, deleting first (the
    name is fixed); ``pulumi.com/waitFor`` on the uid: a custom resource is otherwise ready at once, and Pulumi
    must not wait for training (pulumi-kubernetes 4.34 ``provider/pkg/await``)."""
    job = render("demo", backend="trainjob")
    manifest = next(m for m in job.manifests if m.body["kind"] == "TrainJob")
    assert manifest.replace_on == ("*",) and manifest.custom and manifest.after_previous
    assert manifest.body["metadata"]["annotations"] == {"pulumi.com/waitFor": "jsonpath={.metadata.uid}"}


def test_the_runtime_fails_a_job_on_a_failed_pod_and_replaces_a_disrupted_one() -> None:
    """The runtime's Jobs: the Indexed Job backend's pod failure policy (``components.job.workloads``) and
    ``backoffLimit: 0``; JobSet fails the JobSet when a Job fails (no ``failurePolicy``: jobset v0.12.0
    ``api/jobset/v1alpha2/jobset_types.go``), so restarts stay the agent's (``max_restarts``)."""
    job = runtime_for("none")["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert job["podFailurePolicy"] == {"rules": [DISRUPTION_IGNORED]} and job["backoffLimit"] == 0
    assert "failurePolicy" not in runtime_for("none")["spec"]["template"]["spec"]


@pytest.mark.parametrize(("name", "workers", "fits"), [("a" * 48, 10, True), ("a" * 49, 10, False),
                                                      ("a" * 48, 11, False), ("a" * 47, 11, True)])
def test_the_job_name_leaves_room_for_jobsets_longest_pod_name(name: str, workers: int, fits: bool) -> None:
    """JobSet refuses a JobSet whose longest pod name ``<jobset>-node-0-<last index>-abcde`` is no 63-character
    label (kubernetes-sigs/jobset v0.12.0 ``pkg/webhooks/jobset_webhook.go``)."""
    from components.errors import InvalidJobArgs

    if fits:
        job = render(name, backend="trainjob", workers=workers)
        assert len(f"{name}-node-0-{workers - 1}-abcde") <= 63 and trainjob(job)["metadata"]["name"] == name
    else:
        with pytest.raises(InvalidJobArgs, match=r"JobSet pod name .* would be 64 characters"):
            render(name, backend="trainjob", workers=workers)


@pytest.mark.parametrize("gang", ["none", "volcano", "scheduler-plugins"])
def test_each_runtime_passes_the_trainers_runtime_webhook(gang: str) -> None:
    """kubeflow/trainer v2.3.0 ``pkg/webhooks/trainingruntime_webhook.go`` (``validateReplicatedJobs``, also run
    for ClusterTrainingRuntimes): the trainer's replicated job has ``replicas: 1`` and a container ``node``;
    ``mlPolicy`` holds the torch policy, the only one (the CRD's rule), so the torch plugin injects ``PET_*``."""
    from tests.components.job.trainermerge import node_container, trainer_job

    runtime = runtime_for(gang)
    rjob = trainer_job(runtime["spec"]["template"]["spec"])
    assert rjob["replicas"] == 1
    assert node_container(rjob["template"]["spec"]["template"]["spec"])["command"] == ["python3", "-m", "runtime.agent"]
    assert set(runtime["spec"]["mlPolicy"]) == {"numNodes", "torch"}
    assert runtime["spec"].get("podGroupPolicy") == {"none": None, "volcano": {"volcano": {}},
                                                     "scheduler-plugins": {"coscheduling": {
                                                         "scheduleTimeoutSeconds": 300}}}[gang]
