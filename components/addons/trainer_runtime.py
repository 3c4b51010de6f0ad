"""trainplane's ClusterTrainingRuntimes for Kubeflow Trainer v2: the JobSet every trainplane TrainJob runs as.

A runtime is cluster-wide; what differs per job (image, node count, processes, resources, the agent's
environment, the bundle volume, labels) comes from the TrainJob's ``trainer`` and its ``runtimePatches``
(``components.job.trainjob``). The gang scheduler is the runtime's (its ``podGroupPolicy`` and the pods'
``schedulerName``, which no runtime patch may set), so there is one runtime per gang scheduler.

Upstream rules (kubeflow/trainer v2.3.0):

* the torch plugin (``pkg/runtime/framework/plugins/torch/torch.go``, ``EnforceMLPolicy``) and the JobSet
  builder (``pkg/runtime/framework/plugins/jobset/builder.go``, ``Trainer``) put the TrainJob's image,
  command, args, env and ``PET_*`` only into the container named ``node`` (``constants.Node``) of the
  replicated job labelled ``trainer.kubeflow.org/trainjob-ancestor-step: trainer``;
* ``mlPolicy.numNodes`` is that job's pod count unless the TrainJob sets ``trainer.numNodes``
  (``pkg/runtime/core/trainingruntime.go``, ``newRuntimeInfo``), and the JobSet plugin sets the Job's
  ``parallelism`` and ``completions`` to it (``SyncParallelCount``);
* ``podGroupPolicy.coscheduling`` / ``.volcano`` make the Trainer create the PodGroup, ``minMember`` every
  pod (``pkg/runtime/framework/plugins/coscheduling/coscheduling.go`` and ``.../volcano/volcano.go``,
  ``Build``), and label or annotate the pods with it; neither sets the pods' ``schedulerName``.
"""

from __future__ import annotations

import math
from typing import Any

from components.addons.versions import SCHEDULER_PLUGINS_SCHEDULER, TRAINER_API, VOLCANO_SCHEDULER
from components.capabilities import KUEUE, NO_GANG, SCHEDULER_PLUGINS, VOLCANO
from components.grace import termination_grace_seconds
from runtime.agent import contract
from runtime.agent.spec.job import default

NODE = "node"
"""The replicated job and container name the Trainer configures (``constants.Node``)."""
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
ANCESTOR_TRAINER = "trainer"
FRAMEWORK_LABEL = "trainer.kubeflow.org/framework"
RUNTIME_KIND = "ClusterTrainingRuntime"
TRAINER_GROUP = TRAINER_API.split("/")[0]
TRAINER_PORT = 29500
"""``PET_MASTER_PORT`` on every node (``constants.ContainerTrainerPort`` at v2.3.0)."""
RUNTIME_NAMES = {NO_GANG: "trainplane", VOLCANO: "trainplane-volcano", SCHEDULER_PLUGINS: "trainplane-coscheduling"}
"""The runtime of each gang scheduler; a Kueue-queued job uses the plain one (Kueue admits the TrainJob whole)."""
RUNTIME_GANG_SCHEDULERS = tuple(RUNTIME_NAMES)
"""The gang schedulers a runtime can be made for."""
SCHEDULER_NAMES = {VOLCANO: VOLCANO_SCHEDULER, SCHEDULER_PLUGINS: SCHEDULER_PLUGINS_SCHEDULER}
PLACEHOLDER_IMAGE = "python:3.12-slim"
"""The ``node`` container's image in the runtime; every trainplane TrainJob names its own (``trainer.image``)."""
AGENT_COMMAND = ("python3", "-m", contract.AGENT_MODULE)
"""The ``node`` container's command: the agent (its bundle comes from the TrainJob's runtime patch). A
TrainJob's ``trainer.args`` are the user's entrypoint, appended to it."""
SCHEDULE_TIMEOUT_SECONDS = math.ceil(default("quorum_timeout"))
"""Coscheduling's ``scheduleTimeoutSeconds``: the job spec's default quorum timeout (one per runtime)."""
TERMINATION_GRACE_SECONDS = termination_grace_seconds(default("grace_period"))
"""The runtime's pods' ``terminationGracePeriodSeconds``: a job's with the default grace period, which
therefore needs none in its runtime patch (``components.job.trainjob``). Kueue v0.19.2 drops that field from a
TrainJob's runtime patches when it admits one (it links the Trainer's API at v2.2.1, whose ``PodSpecPatch``
lacks it), and JobSet's webhook then refuses the Trainer's update of the suspended JobSet as an immutable
change: so a queued job with another grace period is refused at preview (``components.job.trainjob_rules``)."""
DISRUPTION_IGNORED = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
"""A pod lost to preemption, eviction or a node drain is replaced, uncounted (the Indexed Job backend's
rule, ``components.job.workloads``); any other failed pod fails the Job (``backoffLimit: 0``) and so the
JobSet, whose ``failurePolicy`` is unset (jobset v0.12.0 ``api/jobset/v1alpha2/jobset_types.go``: a
failed Job fails the JobSet). Restarts of the world belong to the agent (``max_restarts``)."""


def runtime_name(gang_scheduler: str) -> str:
    """The ClusterTrainingRuntime a job with ``gang_scheduler`` runs on.

    Raises:
        KeyError: a gang scheduler without a runtime (``DistributedJobArgs`` refuses none of the four).
    """
    return RUNTIME_NAMES[NO_GANG if gang_scheduler == KUEUE else gang_scheduler]


def pod_group_policy(gang_scheduler: str) -> dict[str, Any]:
    """The runtime's ``podGroupPolicy`` for ``gang_scheduler``; empty for none."""
    if gang_scheduler == VOLCANO:
        return {"volcano": {}}
    if gang_scheduler == SCHEDULER_PLUGINS:
        return {"coscheduling": {"scheduleTimeoutSeconds": SCHEDULE_TIMEOUT_SECONDS}}
    return {}


def cluster_training_runtime(gang_scheduler: str, labels: dict[str, str]) -> dict[str, Any]:
    """The ClusterTrainingRuntime for ``gang_scheduler`` (``none``, ``volcano`` or ``scheduler-plugins``).

    One replicated job ``node`` of Indexed Jobs whose pods run the agent in the container ``node``,
    restart never (a failed pod fails the job: :data:`DISRUPTION_IGNORED`), get no Service links and no
    API token; gang-scheduled ones name their scheduler. ``mlPolicy.torch`` makes the Trainer inject
    ``PET_*``, which the agent checks against its own settings (``TRAINPLANE_TRAINJOB``).

    Args:
        gang_scheduler: which runtime.
        labels: the add-on's labels for the object.

    Raises:
        KeyError: no runtime for ``gang_scheduler``.
    """
    name = RUNTIME_NAMES[gang_scheduler]
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        "containers": [{
            "name": NODE,
            "image": PLACEHOLDER_IMAGE,
            "command": list(AGENT_COMMAND),
            "env": [{"name": contract.TRAINJOB, "value": "true"}],
        }],
    }
    if gang_scheduler in SCHEDULER_NAMES:
        pod["schedulerName"] = SCHEDULER_NAMES[gang_scheduler]
    job = {
        "completionMode": "Indexed",
        "backoffLimit": 0,
        "podReplacementPolicy": "Failed",
        "podFailurePolicy": {"rules": [DISRUPTION_IGNORED]},
        "template": {"spec": pod},
    }
    spec: dict[str, Any] = {
        "mlPolicy": {"numNodes": 1, "torch": {}},
        "template": {"spec": {
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "replicatedJobs": [{
                "name": NODE,
                "replicas": 1,
                "template": {"metadata": {"labels": {ANCESTOR_LABEL: ANCESTOR_TRAINER}}, "spec": job},
            }],
        }},
    }
    policy = pod_group_policy(gang_scheduler)
    if policy:
        spec["podGroupPolicy"] = policy
    return {
        "apiVersion": TRAINER_API,
        "kind": RUNTIME_KIND,
        "metadata": {"name": name, "labels": {FRAMEWORK_LABEL: "torch", **labels}},
        "spec": spec,
    }
