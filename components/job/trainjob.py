"""The Kubeflow Trainer v2 backend: one TrainJob on trainplane's ClusterTrainingRuntime.

The runtime (``components.addons.trainer_runtime``) holds what every trainplane job shares: the agent as the
``node`` container's command, Indexed Jobs that fail on a failed pod, the gang scheduler. The TrainJob holds
the rest, in the two places the Trainer takes it from (kubeflow/trainer v2.3.0):

* ``spec.trainer``: image, ``numNodes``, ``numProcPerNode``, ``resourcesPerNode``, ``env`` (the agent's whole
  environment) and ``args`` (the user's entrypoint, after the agent's command), which the JobSet builder and
  the torch plugin put into the ``node`` container (``pkg/runtime/framework/plugins/jobset/builder.go``,
  ``Trainer``; ``pkg/runtime/framework/plugins/torch/torch.go``, ``EnforceMLPolicy``);
* one ``spec.runtimePatches`` entry of trainplane's own manager: the pods' labels (the job's NetworkPolicy
  selects them) and annotations, the bundle and ``/dev/shm`` volumes and their mounts, node selector,
  tolerations and grace period, strategic-merged into the runtime's JobSet template
  (``pkg/runtime/core/trainingruntime.go``, ``mergeRuntimePatches``); a patch may set env on no ``node``
  container (``pkg/runtime/framework/plugins/jobset/jobset.go``, ``Validate``), so all env is the trainer's.

JobSet makes the headless Service (named after the JobSet, which is named after the TrainJob), the Trainer's
podGroupPolicy the PodGroup, and Kueue's TrainJob integration (``trainer.kubeflow.org/trainjob``) reads the
queue label on the TrainJob: trainplane renders none of them.
"""

from __future__ import annotations

from typing import Any

from components.addons.trainer_runtime import (
    NODE,
    RUNTIME_KIND,
    TERMINATION_GRACE_SECONDS,
    TRAINER_GROUP,
    runtime_name,
)
from components.addons.versions import TRAINER_API
from components.capabilities import VOLCANO
from components.job.args import DistributedJobArgs
from components.job.bundle import RuntimeBundle
from components.job.gang import GangPlacement
from components.job.naming import JobNames
from components.job.pod import PodRole, pod_template
from components.job.workloads import workload_metadata
from components.outputs import Labels, lift

RUNTIME_PATCH_MANAGER = "trainplane.dev/distributed-job"
"""The ``manager`` of trainplane's runtime patch: a domain-prefixed path, as the Trainer's webhook requires
(``validation.IsDomainPrefixedPath``, ``pkg/runtime/framework/plugins/jobset/jobset.go``); Kueue's is
``kueue.x-k8s.io/manager``, so the two never collide in the list keyed by manager."""
VOLCANO_QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"
"""The Trainer's Volcano plugin takes the PodGroup's queue from this annotation on the JobSet template
(``info.Annotations``, which runtime patches' ``template.metadata.annotations`` add to:
``pkg/runtime/framework/plugins/volcano/volcano.go``, ``Build``; ``trainingruntime.go``, ``newRuntimeInfo``)."""
GRACE_FIELD = "terminationGracePeriodSeconds"
PATCHED_POD_FIELDS = ("volumes", GRACE_FIELD, "nodeSelector", "tolerations")
"""The pod fields trainplane sets per job through the runtime patch (the CRD's ``PodSpecPatch`` allows these;
the rest of trainplane's pod is the runtime's, and what neither can carry is refused:
``components.job.trainjob_rules``)."""


def trainer_spec(args: DistributedJobArgs, container: dict[str, Any]) -> dict[str, Any]:
    """``spec.trainer``: the node count and processes the torch plugin turns into ``PET_NNODES`` and
    ``PET_NPROC_PER_NODE`` (a number, never ``auto``: the agent checks them against its own), the image, the
    agent's env, the entrypoint as ``args``, and the pod's requests and limits as ``resourcesPerNode``."""
    trainer: dict[str, Any] = {
        "image": container["image"],
        "numNodes": args.workers,
        "numProcPerNode": args.procs_per_node,
        "env": container["env"],
        "args": lift(list, args.entrypoint),
    }
    if "resources" in container:
        trainer["resourcesPerNode"] = container["resources"]
    return trainer


def runtime_patch(args: DistributedJobArgs, template: dict[str, Any]) -> dict[str, Any]:
    """trainplane's ``runtimePatches`` entry: the pod template's labels, annotations and per-job pod fields
    (:data:`PATCHED_POD_FIELDS`; the grace period only where it is not the runtime's,
    ``trainer_runtime.TERMINATION_GRACE_SECONDS``), and the ``node`` container's volume mounts, for the
    replicated job ``node``; for Volcano, the queue as the JobSet's annotation."""
    pod = template["spec"]
    node_patch = {"name": NODE, "volumeMounts": pod["containers"][0]["volumeMounts"]}
    pod_patch: dict[str, Any] = {"containers": [node_patch]}
    pod_patch.update({key: pod[key] for key in PATCHED_POD_FIELDS if key in pod})
    if pod_patch.get(GRACE_FIELD) == TERMINATION_GRACE_SECONDS:
        del pod_patch[GRACE_FIELD]  # the runtime's already, and Kueue would drop it from the patch
    replicated = {"name": NODE, "template": {"spec": {"template": {"metadata": template["metadata"],
                                                                   "spec": pod_patch}}}}
    patched: dict[str, Any] = {"spec": {"replicatedJobs": [replicated]}}
    if args.gang_scheduler == VOLCANO and args.queue is not None:
        patched["metadata"] = {"annotations": {VOLCANO_QUEUE_ANNOTATION: args.queue}}
    return {"manager": RUNTIME_PATCH_MANAGER, "trainingRuntimeSpec": {"template": patched}}


def train_job(
    names: JobNames, args: DistributedJobArgs, labels: Labels, bundle: RuntimeBundle, gang: GangPlacement
) -> dict[str, Any]:
    """The job's TrainJob: ``runtimeRef`` to the runtime of its gang scheduler, ``trainer``, trainplane's runtime
    patch, ``activeDeadlineSeconds``; metadata as every workload's (the Kueue queue label, the ``waitFor`` on
    the uid).

    The pod is the one every backend renders (``components.job.pod``), split where the Trainer takes it: the
    container named ``node`` (the only one it configures), its agent env written with the peers and
    coordinator under JobSet's pod names (``components.job.naming``).
    """
    role = PodRole(restart_policy=None, container_name=NODE, entrypoint_as_args=True)
    template = pod_template(names, args, role, bundle, gang)
    spec: dict[str, Any] = {
        "runtimeRef": {"apiGroup": TRAINER_GROUP, "kind": RUNTIME_KIND, "name": runtime_name(args.gang_scheduler)},
        "trainer": trainer_spec(args, template["spec"]["containers"][0]),
        "runtimePatches": [runtime_patch(args, template)],
    }
    if args.active_deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = args.active_deadline_seconds
    return {"apiVersion": TRAINER_API, "kind": "TrainJob",
            "metadata": workload_metadata(names, args, labels, gang), "spec": spec}
