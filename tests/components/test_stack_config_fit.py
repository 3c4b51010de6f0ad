"""Stack config cross-checks: a stack's jobs must be ones its cluster can run (the training operator's gang
scheduler, a Kueue ClusterQueue's flavors, the EKS GPU device plugin), and the stacks' own jobs are."""

from __future__ import annotations

import pytest

from tests.components.stackconfigtest import EXISTING_JOB, assert_refused, job, parse

pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("home")]


OPERATOR_GANG = [
    pytest.param(
        "local",
        {"addons": ["volcano", "training-operator"],
         "jobs": job(backend="pytorchjob", gangScheduler="none", queue=None)},
        "trainplane:jobs[0].gangScheduler",
        "'none'",
        "the training operator gang-schedules every PyTorchJob in the cluster with volcano .* set "
        "trainplane:trainingOperatorGangScheduler to none",
        id="PyTorchJob without gang scheduling under an operator that gang-schedules with Volcano",
    ),
    pytest.param(
        "existing",
        {"addons": ["training-operator", "volcano", "kueue"]},
        "trainplane:jobs[0].gangScheduler",
        "'kueue'",
        "gang-schedules every PyTorchJob in the cluster with volcano",
        id="Kueue PyTorchJob under an operator that gang-schedules with Volcano",
    ),
    pytest.param(
        "existing",
        {"jobs": job(backend="pytorchjob", gangScheduler="scheduler-plugins", queue=None)},
        "trainplane:jobs[0].gangScheduler",
        "'scheduler-plugins'",
        "runs without --gang-scheduler-name, so it creates no PodGroup for any PyTorchJob",
        id="scheduler-plugins PyTorchJob under an operator without gang scheduling",
    ),
]

OPERATOR_SETTING = [
    pytest.param(
        "local",
        {"addons": ["volcano", "training-operator"], "trainingOperatorGangScheduler": "scheduler-plugins"},
        "trainplane:trainingOperatorGangScheduler",
        "'scheduler-plugins'",
        "trainplane does not install scheduler-plugins",
        id="operator gang-scheduling with scheduler-plugins on a cluster trainplane made",
    ),
    pytest.param(
        "existing",
        {"trainingOperatorGangScheduler": "yunikorn"},
        "trainplane:trainingOperatorGangScheduler",
        "'yunikorn'",
        "use one of none, volcano, scheduler-plugins",
        id="unknown operator gang scheduler",
    ),
    pytest.param(
        "existing",
        {"trainingOperatorGangScheduler": "volcano"},
        "trainplane:trainingOperatorGangScheduler",
        "'volcano'",
        "add volcano to trainplane:addons",
        id="operator gang-scheduling with a Volcano the stack lacks",
    ),
    pytest.param(
        "local",
        {"trainingOperatorGangScheduler": "none"},
        "trainplane:trainingOperatorGangScheduler",
        "'none'",
        "add training-operator to trainplane:addons or remove this key",
        id="operator setting without the operator",
    ),
]

KUEUE_QUOTA = [
    pytest.param(
        "existing",
        {"existingGpuNodes": True, "jobs": [{**EXISTING_JOB, "gpus": 1}]},
        "trainplane:jobs[0].gpus",
        "1",
        r"ClusterQueue 'trainplane' has no quota for nvidia.com/gpu \(it covers cpu, memory\), so Kueue never "
        r"admits the job \(\"resource nvidia.com/gpu unavailable in ClusterQueue\"\)",
        id="GPU job through a Kueue queue without GPU quota",
    ),
    pytest.param(
        "existing",
        {"jobs": [{**EXISTING_JOB, "cpus": 5}]},
        "trainplane:jobs[0].cpus",
        "5",
        r"the job requests 5 cpu per pod x 2 pods, more than any usable flavor of ClusterQueue 'trainplane' holds "
        r"\(default: 8\)",
        id="more CPU than the Kueue queue holds",
    ),
    pytest.param(
        "existing",
        {"jobs": [{**EXISTING_JOB, "memory": "20Gi"}]},
        "trainplane:jobs[0].memory",
        "'20Gi'",
        r"requests 20Gi memory per pod x 2 pods, .* \(default: 32Gi\)",
        id="more memory than the Kueue queue holds",
    ),
]

DEVICE_PLUGIN = [
    pytest.param(
        "aws-gpu",
        {"addons": ["volcano", "kueue"]},
        "trainplane:jobs[0].gpus",
        "1",
        "no device plugin advertises the GPU nodes' nvidia.com/gpu .* add device-plugin to trainplane:addons",
        id="GPU job on EKS without the device plugin",
    ),
]


@pytest.mark.parametrize(("stack", "overrides", "key", "value", "fix"), OPERATOR_GANG)
def test_a_pytorchjob_must_use_the_gang_scheduler_the_operator_applies_to_every_pytorchjob(
    stack, overrides, key, value, fix
):
    """kubeflow/trainer v1.9.4 ``cmd/training-operator.v1/main.go``: one ``--gang-scheduler-name`` for the
    whole operator; with it set, ``pkg/controller.v1/common/job.go`` creates a PodGroup of that scheduler
    for every PyTorchJob (no per-job opt-out; a pod ``schedulerName`` of another scheduler only draws a
    warning, ``pkg/controller.v1/common/pod.go``), and without it creates none. So with Volcano and the
    operator installed together a ``none`` or ``kueue`` PyTorchJob would be gang-scheduled by Volcano,
    and a ``scheduler-plugins`` one under an operator without the flag would get no PodGroup."""
    assert_refused(stack, overrides, key, value, fix)


@pytest.mark.parametrize(("stack", "overrides", "key", "value", "fix"), OPERATOR_SETTING)
def test_the_operators_gang_scheduler_must_be_one_the_cluster_runs(stack, overrides, key, value, fix):
    """kubeflow/trainer v1.9.4 ``cmd/training-operator.v1/main.go`` (``validateCRD``): with
    ``--gang-scheduler-name`` set the operator exits at start-up unless the matching PodGroup CRD exists."""
    assert_refused(stack, overrides, key, value, fix)


@pytest.mark.parametrize(("stack", "overrides", "key", "value", "fix"), KUEUE_QUOTA)
def test_a_kueue_job_must_fit_one_flavor_of_its_cluster_queue(stack, overrides, key, value, fix):
    """kubernetes-sigs/kueue v0.19.2 ``pkg/scheduler/flavorassigner/flavorassigner.go``: a requested
    resource the ClusterQueue's resource groups do not cover is "unavailable in ClusterQueue"
    (``findFlavorForPodSets``), and a request above a flavor's nominal quota can never fit it
    (``fitsResourceQuota``: "request > maximum capacity"; without a cohort there is nothing to borrow), so
    Kueue never admits the job. Limits count as requests where a container sets none
    (``pkg/workload/resources.go``, ``UseLimitsAsMissingRequestsInPod``)."""
    assert_refused(stack, overrides, key, value, fix)


@pytest.mark.parametrize(("stack", "overrides", "key", "value", "fix"), DEVICE_PLUGIN)
def test_a_gpu_job_on_eks_needs_the_device_plugin(stack, overrides, key, value, fix):
    """awsdocs/amazon-eks-user-guide ``latest/ug/ml/ml-eks-k8s-device-plugin.adoc`` ("Install Kubernetes
    device plugin for GPUs"): "When using the EKS-optimized AL2023 AMIs with NVIDIA GPUs, you must install
    the NVIDIA Kubernetes device plugin"; without it no node advertises ``nvidia.com/gpu`` and a pod
    requesting it stays Pending."""
    assert_refused(stack, overrides, key, value, fix)


def test_the_stacks_own_jobs_fit_their_clusters():
    for stack in ("local", "aws-gpu", "existing"):
        config = parse(stack)
        assert config.jobs and config.capabilities.gpu_resources == config.cluster.gpu_nodes
