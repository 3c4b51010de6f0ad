"""Stack config parsing: a bad value fails at preview naming the config key, the value and the fix, before any
resource is registered."""

from __future__ import annotations

import re

import pytest

from components.errors import StackConfigError
from tests.components.componenttest import KUBECONFIG, run_program, stack_config
from tests.components.stackconfigtest import GPU_GROUP, KUEUE, LOCAL_JOB, job, parse

pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("home")]


BAD_CONFIGS = [
    pytest.param(
        "local",
        {"clusterKind": "gke"},
        "trainplane:clusterKind",
        "'gke'",
        "must be one of kind, eks, existing; use one of kind, eks, existing",
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
        "is required; set it",
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
        "must be one of device-plugin, training-operator, volcano, kueue, trainer; use one of device-plugin, "
        "training-operator, volcano, kueue, trainer",
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
        "is not a key of kueue; use one of",
        id="unknown kueue key",
    ),
    pytest.param(
        "existing",
        {"kueue": {**KUEUE, "localQueues": [{**KUEUE["localQueues"][0], "clusterQueue": "x"}]}},
        "trainplane:kueue.localQueues[0].clusterQueue",
        "'x'",
        "names no defined cluster queue; use one of trainplane",
        id="local queue feeding an unknown cluster queue",
    ),
    pytest.param(
        "existing",
        {"kueue": {**KUEUE, "clusterQueues": [{"name": "q", "quotas": {"default": {"cpu": "x"}}}]}},
        'trainplane:kueue.clusterQueues[0].quotas["default"]["cpu"]',
        "'x'",
        'not a Kubernetes quantity; write it like "512Mi" or "8Gi"',
        id="bad Kueue quota",
    ),
    pytest.param(
        "local",
        {"kindWorkers": "two"},
        "trainplane:kindWorkers",
        "'two'",
        "must be a whole number; use a whole number",
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
        r"is not a key of gpuNodeGroups\[0\]; use one of",
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
        "names no defined kubeconfig context; use one of test",
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
        r"is not a key of jobs\[0\]; use one of",
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
