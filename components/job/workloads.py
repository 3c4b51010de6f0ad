"""The workload that runs the pods: Indexed Job, StatefulSet or Kubeflow PyTorchJob.

Restarts belong to the agent (``max_restarts`` restarts the world in place), so the workloads do
not retry failed pods themselves: ``backoffLimit`` is 0, and only pods lost to disruptions
(preemption, eviction, node drain) are replaced.
"""

from __future__ import annotations

from typing import Any, Mapping

from components.errors import InvalidJobArgs, OperatorRuleError
from components.job import checks
from components.job.args import INDEXED_JOB, NO_GANG, PYTORCHJOB, STATEFULSET, DistributedJobArgs
from components.job.bundle import RuntimeBundle
from components.job.gang import GangPlacement, pytorch_scheduling_policy
from components.job.naming import PYTORCH_MASTER, PYTORCH_WORKER, JobNames
from components.job.pod import PodRole, pod_selector, pod_template

SKIP_AWAIT_ANNOTATION = "pulumi.com/skipAwait"
PYTORCHJOB_API = "kubeflow.org/v1"
PYTORCH_CONTAINER = "pytorch"
"""The container the training operator injects its env into (``PyTorchJobDefaultContainerName``)."""
PYTORCH_PORT_NAME = "pytorchjob-port"
"""The port the operator reads ``MASTER_PORT`` and the elastic rendezvous port from."""
PYTORCH_REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
REPLICA_INDEX_REF = {"fieldRef": {"fieldPath": f"metadata.labels['{PYTORCH_REPLICA_INDEX_LABEL}']"}}
"""Downward-API source of a replica's index (elastic, Worker-only jobs: index = node rank)."""
CLEAN_POD_POLICY = "Running"
"""Delete still-running pods once the job ends (the operator's default, None, leaves workers running)."""


def skip_await(args: DistributedJobArgs) -> bool:
    """Whether Pulumi must not wait for the workload.

    Gang-scheduled pods may stay Pending until the whole gang fits, and Pulumi waits for a Job
    to *complete*, i.e. for training to end; either would hold ``pulumi up`` for its 10-minute
    timeout. A plain StatefulSet is awaited: its readiness probes make that cheap and meaningful.
    """
    return args.gang_scheduler != NO_GANG or args.workload_backend == INDEXED_JOB


def workload_metadata(
    names: JobNames, args: DistributedJobArgs, labels: Mapping[str, str], gang: GangPlacement
) -> dict[str, Any]:
    """Name, namespace, labels (plus the gang's) and the skip-await annotation of the workload."""
    meta: dict[str, Any] = {
        "name": names.job,
        "namespace": names.namespace,
        "labels": {**labels, **gang.workload_labels},
    }
    if skip_await(args):
        meta["annotations"] = {SKIP_AWAIT_ANNOTATION: "true"}
    return meta


def indexed_job(
    names: JobNames, args: DistributedJobArgs, labels: Mapping[str, str], bundle: RuntimeBundle,
    gang: GangPlacement,
) -> dict[str, Any]:
    """A ``batch/v1`` Indexed Job: one pod per node, node rank = ``JOB_COMPLETION_INDEX``.

    ``subdomain`` is the headless Service, so pod ``i`` resolves as ``<job>-<i>.<service>``.
    """
    role = PodRole(restart_policy="Never", subdomain=names.service)
    spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": args.workers,
        "parallelism": args.workers,
        "backoffLimit": 0,
        "podReplacementPolicy": "Failed",
        "podFailurePolicy": {"rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        ]},
        "template": pod_template(names, args, role, bundle, gang),
    }
    if args.active_deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = args.active_deadline_seconds
    if args.ttl_seconds_after_finished is not None:
        spec["ttlSecondsAfterFinished"] = args.ttl_seconds_after_finished
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": workload_metadata(names, args, labels, gang), "spec": spec}


def stateful_set(
    names: JobNames, args: DistributedJobArgs, labels: Mapping[str, str], bundle: RuntimeBundle,
    gang: GangPlacement,
) -> dict[str, Any]:
    """An ``apps/v1`` StatefulSet for service mode: pods start in parallel, rank = ordinal."""
    role = PodRole(restart_policy="Always", probes=True)
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": workload_metadata(names, args, labels, gang),
        "spec": {
            "serviceName": names.service,
            "replicas": args.workers,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": pod_selector(names)},
            "template": pod_template(names, args, role, bundle, gang),
        },
    }


def pytorch_job(
    names: JobNames, args: DistributedJobArgs, labels: Mapping[str, str], bundle: RuntimeBundle,
    gang: GangPlacement,
) -> dict[str, Any]:
    """A Kubeflow ``PyTorchJob`` following the training operator's rules.

    Fixed size: one Master (node 0) plus ``workers - 1`` Workers; the operator's ``MASTER_ADDR``
    (``<job>-master-0``) and ``RANK`` give the agent its coordinator and node rank. Elastic
    (``min_workers``/``max_workers``): Workers only with an ``elasticPolicy``, the operator's shape
    for elastic jobs; the agent is pointed at ``<job>-worker-0`` and takes its node rank from the
    pod's replica-index label.

    Raises:
        OperatorRuleError: the rendered job breaks a rule of :func:`check_pytorchjob`.
    """
    elastic = args.elastic
    role = PodRole(
        restart_policy="Never",
        container_name=PYTORCH_CONTAINER,
        rendezvous_port_name=PYTORCH_PORT_NAME,
        set_master_port=elastic,
        node_rank_from=REPLICA_INDEX_REF if elastic else None,
    )
    template = pod_template(names, args, role, bundle, gang)
    replicas: dict[str, int] = (
        {PYTORCH_WORKER: args.workers} if elastic else {PYTORCH_MASTER: 1, PYTORCH_WORKER: args.workers - 1}
    )
    run_policy: dict[str, Any] = {"cleanPodPolicy": CLEAN_POD_POLICY, "backoffLimit": 0}
    optional = {
        "activeDeadlineSeconds": args.active_deadline_seconds,
        "ttlSecondsAfterFinished": args.ttl_seconds_after_finished,
        "schedulingPolicy": pytorch_scheduling_policy(args),
    }
    run_policy.update({k: v for k, v in optional.items() if v is not None})
    spec: dict[str, Any] = {
        "nprocPerNode": str(args.procs_per_node),
        "pytorchReplicaSpecs": {
            replica: {"replicas": count, "restartPolicy": "Never", "template": template}
            for replica, count in replicas.items()
            if count > 0
        },
        "runPolicy": run_policy,
    }
    if elastic:
        spec["elasticPolicy"] = {
            "minReplicas": args.min_workers,
            "maxReplicas": args.max_workers,
            "maxRestarts": args.max_restarts,
        }
    manifest = {"apiVersion": PYTORCHJOB_API, "kind": "PyTorchJob",
                "metadata": workload_metadata(names, args, labels, gang), "spec": spec}
    check_pytorchjob(manifest)
    return manifest


def check_pytorchjob(manifest: Mapping[str, Any]) -> None:
    """Enforce the training operator's rules on a PyTorchJob manifest.

    Rules: a DNS-1035 name; only Master and Worker replicas; exactly one Master if any; at least
    one Worker if listed; a container named ``pytorch`` in every replica (the operator injects its
    env there only); ``runPolicy.cleanPodPolicy`` ``Running``; and no Worker-only job without an
    ``elasticPolicy``, which the operator would start with no ``MASTER_ADDR``/``RANK``/``WORLD_SIZE``.

    Raises:
        OperatorRuleError: the first rule broken, naming the field and the fix.
    """
    name = manifest["metadata"]["name"]
    try:
        checks.require_dns1035("metadata.name", name)
    except InvalidJobArgs as e:
        raise OperatorRuleError(f"PyTorchJob {e}") from e
    spec = manifest["spec"]
    replicas = spec["pytorchReplicaSpecs"]
    unknown = set(replicas) - {PYTORCH_MASTER, PYTORCH_WORKER}
    if unknown:
        raise OperatorRuleError(f"PyTorchJob {name}: replica types {sorted(unknown)} are not allowed; "
                                "use Master and Worker")
    if PYTORCH_MASTER in replicas and replicas[PYTORCH_MASTER].get("replicas", 1) != 1:
        raise OperatorRuleError(f"PyTorchJob {name}: Master.replicas must be exactly 1; "
                                "put the other nodes in Worker")
    if PYTORCH_WORKER in replicas and replicas[PYTORCH_WORKER].get("replicas", 1) < 1:
        raise OperatorRuleError(f"PyTorchJob {name}: Worker.replicas must be >= 1; drop the Worker replica")
    if PYTORCH_MASTER not in replicas and "elasticPolicy" not in spec:
        raise OperatorRuleError(f"PyTorchJob {name}: a Worker-only job without elasticPolicy gets no "
                                "MASTER_ADDR/RANK/WORLD_SIZE from the operator; add a Master replica or "
                                "set min_workers/max_workers")
    for replica, body in replicas.items():
        containers = [c["name"] for c in body["template"]["spec"]["containers"]]
        if PYTORCH_CONTAINER not in containers:
            raise OperatorRuleError(f"PyTorchJob {name}: {replica} has containers {containers}; the operator "
                                    f"only configures a container named {PYTORCH_CONTAINER!r}")
    if spec.get("runPolicy", {}).get("cleanPodPolicy") != CLEAN_POD_POLICY:
        raise OperatorRuleError(f"PyTorchJob {name}: runPolicy.cleanPodPolicy must be {CLEAN_POD_POLICY!r} "
                                "so workers stop when the Master decides the job's outcome")


WORKLOAD_BUILDERS = {INDEXED_JOB: indexed_job, STATEFULSET: stateful_set, PYTORCHJOB: pytorch_job}


def workload_manifest(
    names: JobNames, args: DistributedJobArgs, labels: Mapping[str, str], bundle: RuntimeBundle,
    gang: GangPlacement,
) -> dict[str, Any]:
    """The workload of ``args.workload_backend``."""
    return WORKLOAD_BUILDERS[args.workload_backend](names, args, labels, bundle, gang)

