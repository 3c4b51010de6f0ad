"""Stack config parsing: good stack files parse; bad values fail at preview naming the config key,
the value and the fix."""

from __future__ import annotations

import copy
import re

import pytest

from components.addons.versions import VOLCANO_SCHEDULER
from components.cluster import EksGpuClusterArgs, ExistingClusterArgs, KindClusterArgs
from components.errors import StackConfigError
from components.stack import parse_stack_config
from tests.components.componenttest import KUBECONFIG, getter, kube_home, run_program, stack_config, stack_file

LOCAL_JOB = stack_file("local")["trainplane:jobs"][0]
GPU_GROUP = stack_file("aws-gpu")["trainplane:gpuNodeGroups"][0]
KUEUE = stack_file("existing")["trainplane:kueue"]
EXISTING_JOB = stack_file("existing")["trainplane:jobs"][0]


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    """A HOME with a ~/.kube/config: the existing stack reads kubectl's default kubeconfig."""
    monkeypatch.setenv("HOME", str(kube_home(tmp_path)))
    return tmp_path


def parse(stack: str, **overrides):
    return parse_stack_config(getter(stack_config(stack, **overrides)))


def job(**changes):
    return [{**copy.deepcopy(LOCAL_JOB), **changes}]


def test_local_stack_is_kind_with_volcano_and_the_digits_batch_and_service_jobs():
    config = parse("local")

    assert config.cluster == KindClusterArgs(workers=2, load_images=("trainplane-examples:dev",))
    assert config.addons.volcano.queue == "trainplane"
    assert config.addons.device_plugin is None and config.addons.kueue is None
    assert [(j.name, j.args.mode, j.args.workers, j.args.num_proc, j.args.gang_scheduler) for j in config.jobs] == [
        ("digits", "batch", 2, 2, "volcano"),
        ("digits-service", "service", 2, 2, "none"),
    ]
    assert config.jobs[1].args.pythonpath == ("/app/examples",)


def test_aws_gpu_stack_is_eks_with_a_gpu_group_and_a_gpu_job():
    config = parse("aws-gpu")

    assert isinstance(config.cluster, EksGpuClusterArgs)
    assert config.cluster.gpu_node_groups[0].instance_types == ("g5.2xlarge",)
    assert config.addons.device_plugin is not None
    assert config.jobs[0].args.gpus == 1


def test_existing_stack_runs_a_pytorchjob_through_kueue():
    config = parse("existing")

    assert config.cluster == ExistingClusterArgs()
    assert config.addons.training_operator.gang_scheduler_name is None
    assert config.addons.kueue.has_local_queue("default", "trainplane")
    assert (config.jobs[0].args.workload_backend, config.jobs[0].args.gang_scheduler) == (
        "pytorchjob",
        "kueue",
    )


def test_training_operator_gang_flag_follows_volcano():
    config = parse("local", addons=["volcano", "training-operator"])

    assert config.addons.training_operator.gang_scheduler_name == VOLCANO_SCHEDULER


BAD_CONFIGS = [
    pytest.param(
        "local",
        {"clusterKind": "gke"},
        "trainplane:clusterKind",
        "'gke'",
        "use one of kind, eks, existing",
        id="unknown cluster kind",
    ),
    pytest.param(
        "aws-gpu",
        {"gpuNodeGroups": [{**GPU_GROUP, "instanceTypes": []}]},
        "trainplane:gpuNodeGroups[0].instanceTypes",
        "[]",
        "list at least one value",
        id="GPU node group without instance types",
    ),
    pytest.param(
        "aws-gpu",
        {"gpuNodeGroups": [{k: v for k, v in GPU_GROUP.items() if k != "instanceTypes"}]},
        "trainplane:gpuNodeGroups[0].instanceTypes",
        "None",
        "set it; it is required",
        id="GPU node group missing instance types",
    ),
    pytest.param(
        "local",
        {"jobs": job(gpus=1, numProc="auto")},
        "trainplane:jobs[0].gpus",
        "1",
        "the cluster has no GPU nodes; add a GPU node group",
        id="GPU job on a cluster without GPU nodes",
    ),
    pytest.param(
        "aws-gpu",
        {"gpuNodeGroups": None, "jobs": job(gpus=1)},
        "trainplane:jobs[0].gpus",
        "1",
        "add a GPU node group to trainplane:gpuNodeGroups",
        id="GPU job on eks without a GPU node group",
    ),
    pytest.param(
        "existing",
        {"jobs": job(gangScheduler="kueue", queue="research")},
        "trainplane:jobs[0].queue",
        "'research'",
        "no LocalQueue 'research' in namespace 'default' .* add it to trainplane:kueue.localQueues",
        id="Kueue queue referenced but not configured",
    ),
    pytest.param(
        "existing",
        {"jobs": job(gangScheduler="kueue", queue="trainplane", namespace="ml")},
        "trainplane:jobs[0].queue",
        "'trainplane'",
        "in namespace 'ml'",
        id="Kueue queue in another namespace",
    ),
    pytest.param(
        "existing",
        {"jobs": job(gangScheduler="kueue", queue=None, clusterQueue="gpus")},
        "trainplane:jobs[0].clusterQueue",
        "'gpus'",
        "use a ClusterQueue from trainplane:kueue.clusterQueues",
        id="Kueue cluster queue not configured",
    ),
    pytest.param(
        "local",
        {"addons": [], "jobs": job(gangScheduler="kueue")},
        "trainplane:jobs[0].gangScheduler",
        "'kueue'",
        "add kueue to trainplane:addons",
        id="Kueue job without Kueue",
    ),
    pytest.param(
        "local",
        {"addons": []},
        "trainplane:jobs[0].gangScheduler",
        "'volcano'",
        "add volcano to trainplane:addons",
        id="Volcano job without Volcano",
    ),
    pytest.param(
        "local",
        {"jobs": job(queue="research")},
        "trainplane:jobs[0].queue",
        "'research'",
        "use a Volcano queue the stack has: trainplane, default",
        id="Volcano queue not configured",
    ),
    pytest.param(
        "local",
        {"jobs": job(backend="pytorchjob", gangScheduler="none", queue=None)},
        "trainplane:jobs[0].backend",
        "'pytorchjob'",
        "add training-operator to trainplane:addons",
        id="PyTorchJob without the training operator",
    ),
    pytest.param(
        "local",
        {"jobs": job(gangScheduler="scheduler-plugins", queue=None)},
        "trainplane:jobs[0].gangScheduler",
        "'scheduler-plugins'",
        "scheduler does not run on the cluster \\(trainplane does not install it\\)",
        id="scheduler-plugins on a cluster trainplane made",
    ),
    pytest.param(
        "local",
        {"addons": ["volcano", "slurm"]},
        "trainplane:addons",
        "'slurm'",
        "use add-ons from device-plugin, training-operator, volcano, kueue",
        id="unknown add-on",
    ),
    pytest.param(
        "local",
        {"kueue": KUEUE},
        "trainplane:kueue",
        "",
        "add kueue to trainplane:addons",
        id="Kueue queues without Kueue",
    ),
    pytest.param(
        "existing",
        {"kueue": {**KUEUE, "cohorts": []}},
        "trainplane:kueue.cohorts",
        "[]",
        "unknown key; use one of",
        id="unknown kueue key",
    ),
    pytest.param(
        "existing",
        {"kueue": {**KUEUE, "localQueues": [{**KUEUE["localQueues"][0], "clusterQueue": "x"}]}},
        "trainplane:kueue.localQueues[0].clusterQueue",
        "'x'",
        r"use a defined one: \['trainplane'\]",
        id="local queue feeding an unknown cluster queue",
    ),
    pytest.param(
        "existing",
        {"kueue": {**KUEUE, "clusterQueues": [{"name": "q", "quotas": {"default": {"cpu": "x"}}}]}},
        'trainplane:kueue.clusterQueues[0].quotas["default"]["cpu"]',
        "'x'",
        "use a quantity",
        id="bad Kueue quota",
    ),
    pytest.param(
        "local",
        {"kindWorkers": "two"},
        "trainplane:kindWorkers",
        "'two'",
        "use a whole number",
        id="kind workers not a number",
    ),
    pytest.param(
        "local",
        {"kindWorkers": -1},
        "trainplane:kindWorkers",
        "-1",
        "use a whole number >= 0",
        id="negative kind workers",
    ),
    pytest.param(
        "local",
        {"clusterName": "My_Cluster"},
        "trainplane:clusterName",
        "'My_Cluster'",
        "lower-case",
        id="cluster name not a DNS label",
    ),
    pytest.param(
        "local",
        {"gpuNodeGroups": [GPU_GROUP]},
        "trainplane:gpuNodeGroups",
        "",
        "only eks clusters",
        id="node groups on kind",
    ),
    pytest.param(
        "aws-gpu",
        {"availabilityZones": ["us-west-2a"]},
        "trainplane:availabilityZones",
        "",
        "list 2 or more zones",
        id="one availability zone",
    ),
    pytest.param(
        "aws-gpu",
        {"gpuNodeGroups": [{**GPU_GROUP, "efa": True}]},
        "trainplane:gpuNodeGroups[0].availabilityZone",
        "None",
        "name the placement group's zone",
        id="EFA without a zone",
    ),
    pytest.param(
        "aws-gpu",
        {"gpuNodeGroups": [{**GPU_GROUP, "efa": True, "availabilityZone": "eu-west-1a"}]},
        "trainplane:gpuNodeGroups[0].availabilityZone",
        "'eu-west-1a'",
        "pick one of availability_zones",
        id="EFA zone outside the VPC",
    ),
    pytest.param(
        "aws-gpu",
        {"gpuNodeGroups": [{**GPU_GROUP, "gpus": 8}]},
        "trainplane:gpuNodeGroups[0].gpus",
        "8",
        "unknown key",
        id="unknown node group key",
    ),
    pytest.param(
        "existing",
        {"kubeconfig": "/nonexistent/config"},
        "trainplane:kubeconfig",
        "'/nonexistent/config'",
        "no file at /nonexistent/config",
        id="missing kubeconfig file",
    ),
    pytest.param(
        "existing",
        {"kubeconfig": KUBECONFIG, "kubeContext": "prod"},
        "trainplane:kubeContext",
        "'prod'",
        "use one of the kubeconfig's contexts: test",
        id="unknown context",
    ),
    pytest.param(
        "local",
        {"jobs": job(workers=0)},
        "trainplane:jobs[0].workers",
        "0",
        "use 1 or more nodes",
        id="job with no workers",
    ),
    pytest.param(
        "local",
        {"jobs": job(numproc=2)},
        "trainplane:jobs[0].numproc",
        "2",
        "unknown key; use one of",
        id="misspelt job key",
    ),
    pytest.param(
        "local",
        {"jobs": job(name="Digits")},
        "trainplane:jobs[0].name",
        "'Digits'",
        "",
        id="job name not DNS-1035",
    ),
    pytest.param(
        "local",
        {"jobs": job() + job()},
        "trainplane:jobs[1].name",
        "'digits'",
        "its own name",
        id="duplicate job name",
    ),
    pytest.param(
        "local", {"jobs": {"digits": LOCAL_JOB}}, "trainplane:jobs", "", "use a list", id="jobs not a list"
    ),
]


@pytest.mark.parametrize(("stack", "overrides", "key", "value", "fix"), BAD_CONFIGS)
def test_bad_config_fails_naming_key_value_and_fix(stack, overrides, key, value, fix):
    with pytest.raises(StackConfigError, match=rf"^{re.escape(key)} = {re.escape(value)}.*{fix}") as caught:
        parse(stack, **overrides)
    assert caught.value.key == key


def test_bad_config_stops_the_program_before_any_resource_is_registered():
    with pytest.raises(StackConfigError, match="trainplane:clusterKind"):
        run_program(stack_config("local", clusterKind="gke"))


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
        {"addons": ["volcano"]},
        "trainplane:jobs[0].gpus",
        "1",
        "no device plugin advertises the GPU nodes' nvidia.com/gpu .* add device-plugin to trainplane:addons",
        id="GPU job on EKS without the device plugin",
    ),
]


def assert_refused(stack, overrides, key, value, fix):
    """The stack's config fails at preview with the key, the value and the fix."""
    with pytest.raises(StackConfigError, match=rf"^{re.escape(key)} = {re.escape(value)}.*{fix}") as caught:
        parse(stack, **overrides)
    assert caught.value.key == key


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
