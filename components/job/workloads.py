"""The workload that runs the pods: Indexed Job, StatefulSet or Kubeflow PyTorchJob.

Restarts of the world belong to the agent (``max_restarts`` restarts it in place), so a fixed-size job's
workload fails on its first failed pod: an Indexed Job with ``backoffLimit: 0``, a PyTorchJob whose
replicas have ``restartPolicy: Never``. An elastic job survives a lost pod: the workload replaces it (up
to ``backoff_limit`` times) and the replacement rejoins the running world. Pods lost to disruptions
(preemption, eviction, node drain) are replaced without counting.
"""

from __future__ import annotations

from typing import Any, Mapping

from components.awaiting import CREATED, WAIT_FOR_ANNOTATION
from components.capabilities import NO_GANG
from components.errors import InvalidJobArgs, OperatorRuleError
from components.job import checks
from components.job.args import DistributedJobArgs
from components.job.backends import INDEXED_JOB, PYTORCHJOB, STATEFULSET
from components.job.bundle import RuntimeBundle
from components.job.gang import GangPlacement, pytorch_scheduling_policy
from components.job.naming import PYTORCH_MASTER, PYTORCH_WORKER, JobNames
from components.job.pod import AGENT_CONTAINER, PodRole, pod_selector, pod_template
from components.outputs import Labels, merged
from runtime.agent import contract

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
DISRUPTION_IGNORED = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
"""Pod failure policy rule: a pod lost to preemption, eviction or a node drain is replaced, uncounted."""
FAILED_FOR_GOOD = {"action": "FailJob", "onExitCodes": {"containerName": AGENT_CONTAINER, "operator": "In",
                                                        "values": [contract.EXIT_JOB_FAILED]}}
"""Pod failure policy rule of an elastic Indexed Job: an agent exiting ``EXIT_JOB_FAILED`` (its job
failed for good: a node's failure budget spent) fails the Job at once; replaced pods would run it again."""


def awaits_readiness(args: DistributedJobArgs) -> bool:
    """Whether ``pulumi up`` waits for the workload to become ready (Pulumi's own await logic).

    Only a plain StatefulSet is awaited: its readiness probes make that cheap and meaningful. Pulumi
    waits for a Job to *complete*, i.e. for training to end, and gang-scheduled pods may stay Pending
    until the whole gang fits; either would hold ``pulumi up`` for its 10-minute timeout.
    """
    return args.workload_backend == STATEFULSET and args.gang_scheduler == NO_GANG


def workload_metadata(
    names: JobNames, args: DistributedJobArgs, labels: Labels, gang: GangPlacement
) -> dict[str, Any]:
    """Name, namespace, labels (plus the gang's) and, unless Pulumi awaits readiness, the cheap
    ``pulumi.com/waitFor`` that replaces Pulumi's await logic but, unlike ``pulumi.com/skipAwait``, leaves
    the delete of a replaced Job awaited (``components.awaiting``).
    """
    meta: dict[str, Any] = {
        "name": names.job,
        "namespace": names.namespace,
        "labels": merged(labels, gang.workload_labels),
    }
    if not awaits_readiness(args):
        meta["annotations"] = {WAIT_FOR_ANNOTATION: CREATED}
    return meta


def indexed_job(
    names: JobNames, args: DistributedJobArgs, labels: Labels, bundle: RuntimeBundle,
    gang: GangPlacement,
) -> dict[str, Any]:
    """A ``batch/v1`` Indexed Job: one pod per node, node rank = ``JOB_COMPLETION_INDEX``.

    ``subdomain`` is the headless Service, so pod ``i`` resolves as ``<job>-<i>.<service>``. The Job
    controller's rule (k8s.io/api ``batch/v1`` ``JobSpec``): a failed pod not matched by a pod failure
    policy rule counts toward ``backoffLimit``, and while the count stays within it the controller creates
    a replacement pod for the index; past it the Job fails. ``Ignore`` rules (``DisruptionTarget``) do
    not count. So ``backoffLimit`` is 0 for a fixed-size job and ``backoff_limit`` for an elastic one.
    Rules are tried in order and the first that matches decides (kubernetes/kubernetes
    ``pkg/controller/job/pod_failure_policy.go``, ``matchPodFailurePolicy``); an ``onExitCodes`` rule
    matches a terminated container's non-zero code, and ``FailJob`` fails the Job. An elastic job's
    agents exit ``EXIT_JOB_FAILED`` once it failed for good, which :data:`FAILED_FOR_GOOD` fails it on,
    after the ``DisruptionTarget`` rule (a pod evicted while exiting is still replaced uncounted). An
    elastic job also has :func:`elastic_success_policy`.
    """
    role = PodRole(restart_policy="Never", subdomain=names.service)
    spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": args.workers,
        "parallelism": args.workers,
        "backoffLimit": args.pod_backoff_limit,
        "podReplacementPolicy": "Failed",
        "podFailurePolicy": {"rules": [DISRUPTION_IGNORED, *([FAILED_FOR_GOOD] if args.elastic else [])]},
        "template": pod_template(names, args, role, bundle, gang),
    }
    if args.elastic:
        spec["successPolicy"] = elastic_success_policy(args)
    if args.active_deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = args.active_deadline_seconds
    if args.ttl_seconds_after_finished is not None:
        spec["ttlSecondsAfterFinished"] = args.ttl_seconds_after_finished
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": workload_metadata(names, args, labels, gang), "spec": spec}


def elastic_success_policy(args: DistributedJobArgs) -> dict[str, Any]:
    """An elastic Indexed Job's ``successPolicy``: complete once ``min_workers`` indexes have succeeded.

    Without one, the Job completes only when every index has succeeded (k8s.io/api v0.34.4 ``batch/v1/types.go``:
    the rules declare a Job succeeded "before ``.status.succeeded >= .spec.completions``"). An elastic job may
    finish with fewer nodes than it started: an index whose pod was lost and whose replacement never ran (no
    room, or it came after the world ended and found no job) never succeeds, and the Job would stay active, or
    fail once that index's pods spent ``backoffLimit``. An agent exits 0 only with its job's verdict of success
    (the coordinator's, once every rank of the world has exited 0), and a successful world had at least
    ``min_workers`` nodes, so ``min_workers`` succeeded indexes mean the job succeeded: the rule
    (``succeededCount``) adds ``SuccessCriteriaMet``, the Job controller removes the lingering pods and the
    Job ends ``Complete``. ``successPolicy`` is immutable and allowed only on Indexed Jobs (same file); a
    fixed-size job needs every index, the default.
    """
    return {"rules": [{"succeededCount": args.spec.min_nodes}]}


def stateful_set(
    names: JobNames, args: DistributedJobArgs, labels: Labels, bundle: RuntimeBundle,
    gang: GangPlacement,
) -> dict[str, Any]:
    """An ``apps/v1`` StatefulSet for service mode: pods start in parallel, rank = ordinal.

    An elastic one reads its size settings from the size ConfigMap, so a changed ``workers`` changes only
    ``replicas``: new pods join the running world and no running pod is rolled.
    """
    size_from = names.size_configmap if args.elastic else None
    role = PodRole(restart_policy="Always", probes=True, size_from=size_from)
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
    names: JobNames, args: DistributedJobArgs, labels: Labels, bundle: RuntimeBundle,
    gang: GangPlacement,
) -> dict[str, Any]:
    """A Kubeflow ``PyTorchJob`` following the training operator's rules.

    Fixed size: one Master (node 0) plus ``workers - 1`` Workers; the operator's ``MASTER_ADDR``
    (``<job>-master-0``) and ``RANK`` give the agent its coordinator and node rank. Elastic
    (``min_workers``/``max_workers``): Workers only with an ``elasticPolicy``, the operator's shape
    for elastic jobs; the agent is pointed at ``<job>-worker-0`` and takes its node rank from the
    pod's replica-index label.

    Restarts, by the operator's rule (kubeflow/trainer v1.9.4
    ``pkg/controller.v1/pytorch/pytorchjob_controller.go``, ``UpdateJobStatus``): a failed pod of a
    replica whose ``restartPolicy`` is ``Never`` fails the whole job, so a fixed-size job keeps
    ``Never``. An elastic one has ``OnFailure``: the kubelet restarts a failed agent in its pod, which
    never reaches phase Failed, and ``runPolicy.backoffLimit`` bounds those restarts (the operator counts
    the containers' restarts against it, ``pkg/core/job.go`` ``PastBackoffLimit``). A deleted or evicted
    pod is recreated under either policy.

    Raises:
        OperatorRuleError: the rendered job breaks a rule of :func:`check_pytorchjob`.
    """
    elastic = args.elastic
    role = PodRole(
        restart_policy=None,
        container_name=PYTORCH_CONTAINER,
        rendezvous_port_name=PYTORCH_PORT_NAME,
        set_master_port=elastic,
        node_rank_from=REPLICA_INDEX_REF if elastic else None,
    )
    template = pod_template(names, args, role, bundle, gang)
    replicas: dict[str, int] = (
        {PYTORCH_WORKER: args.workers} if elastic else {PYTORCH_MASTER: 1, PYTORCH_WORKER: args.workers - 1}
    )
    restart_policy = "OnFailure" if elastic else "Never"
    run_policy: dict[str, Any] = {"cleanPodPolicy": CLEAN_POD_POLICY, "backoffLimit": args.pod_backoff_limit}
    optional = {
        "activeDeadlineSeconds": args.active_deadline_seconds,
        "ttlSecondsAfterFinished": args.ttl_seconds_after_finished,
        "schedulingPolicy": pytorch_scheduling_policy(args),
    }
    run_policy.update({k: v for k, v in optional.items() if v is not None})
    spec: dict[str, Any] = {
        "nprocPerNode": str(args.procs_per_node),
        "pytorchReplicaSpecs": {
            replica: {"replicas": count, "restartPolicy": restart_policy, "template": template}
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
    names: JobNames, args: DistributedJobArgs, labels: Labels, bundle: RuntimeBundle,
    gang: GangPlacement,
) -> dict[str, Any]:
    """The workload of ``args.workload_backend``."""
    return WORKLOAD_BUILDERS[args.workload_backend](names, args, labels, bundle, gang)

