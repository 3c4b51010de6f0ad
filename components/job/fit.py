"""Whether a cluster can run a job: pure checks of ``DistributedJobArgs`` against ``ClusterCapabilities``.

Each check raises :class:`~components.errors.InvalidJobArgs` naming the job's field, its value, why the
cluster cannot honour it (quoting the upstream rule) and the fix, so the job fails at ``pulumi
preview`` instead of as pods that stay Pending, a job Kueue never admits or a PodGroup nobody asked for.
"""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from typing import Any, Mapping, Optional, cast

import pulumi
from kubernetes.utils import parse_quantity

from components.addons.trainer_runtime import runtime_name
from components.capabilities import (
    KUEUE,
    NO_GANG,
    SCHEDULER_PLUGINS,
    VOLCANO,
    ClusterCapabilities,
    KueueCapabilities,
    KueueClusterQueue,
    KueueFlavor,
)
from components.errors import InvalidJobArgs
from components.job.args import DistributedJobArgs
from components.job.backends import INDEXED_JOB, PYTORCHJOB, STATEFULSET, TRAINJOB
from components.job.platformfit import check_platform_fits
from components.job.pod import cpu_quantity
from runtime.agent import contract

KUEUE_FRAMEWORKS = {INDEXED_JOB: "batch/job", PYTORCHJOB: "kubeflow.org/pytorchjob", STATEFULSET: "statefulset",
                    TRAINJOB: "trainer.kubeflow.org/trainjob"}
"""The Kueue integration (``integrations.frameworks`` entry) that manages each workload kind."""
REQUEST_FIELDS = (("cpu", "cpus"), ("memory", "memory"), (contract.GPU_RESOURCE, "gpus"), ("pods", "workers"))
"""What a job's pods ask Kueue for, and the job field that sets each."""


QUEUE_FIELDS = ("namespace", "queue", "cluster_queue", "node_selector")
"""The fields taking a ``pulumi.Input`` that the queue checks read (a Kueue LocalQueue is looked up in the
job's namespace; a flavor must allow the pods' node selector)."""


def check_fits(args: DistributedJobArgs, cluster: ClusterCapabilities) -> Optional[pulumi.Output[None]]:
    """Check that ``cluster`` can run the job ``args`` describes.

    Everything known now is checked now. When a field in :data:`QUEUE_FIELDS` is an Output, the queue
    checks that read it run when its value is known, in the Output returned.

    Args:
        args: the validated job arguments.
        cluster: what the target cluster provides.

    Returns:
        ``None`` when everything was checked, else an Output that resolves once the rest passes and raises
        :class:`InvalidJobArgs` otherwise (the job's resources wait for it).

    Raises:
        InvalidJobArgs: GPUs the cluster does not advertise, a PyTorchJob without the training operator
            or at odds with the operator's cluster-wide gang scheduler, a gang scheduler or queue the
            cluster lacks, a Kueue integration that is off, or requests no ClusterQueue flavor holds.
    """
    _check_gpus(args, cluster)
    _check_operator(args, cluster)
    check_platform_fits(args, cluster)
    _check_trainer(args, cluster)
    pending = [name for name in QUEUE_FIELDS if isinstance(getattr(args, name), pulumi.Output)]
    _check_scheduler(args, cluster, queues=not pending)
    if not pending:
        return None

    def check_queues(values: list[Any]) -> None:
        _check_scheduler(replace(args, **dict(zip(pending, values))), cluster, queues=True)

    return pulumi.Output.all(*(getattr(args, name) for name in pending)).apply(check_queues)


def _check_scheduler(a: DistributedJobArgs, cluster: ClusterCapabilities, queues: bool) -> None:
    """The gang scheduler's checks; the queue's own (which read :data:`QUEUE_FIELDS`) only if ``queues``."""
    if a.gang_scheduler == VOLCANO:
        _check_volcano(a, cluster, queues)
    elif a.gang_scheduler == SCHEDULER_PLUGINS and not cluster.scheduler_plugins:
        raise InvalidJobArgs("gang_scheduler", a.gang_scheduler, "the scheduler-plugins coscheduling "
                             "scheduler does not run on the cluster (trainplane does not install it)",
                             'use gang_scheduler="volcano" or "kueue", or a cluster that runs it (an existing one)')
    elif a.gang_scheduler == KUEUE:
        _check_kueue(a, cluster.kueue, queues)


def _check_gpus(a: DistributedJobArgs, cluster: ClusterCapabilities) -> None:
    if not a.gpus:
        return
    if not cluster.gpu_nodes:
        raise InvalidJobArgs("gpus", a.gpus, "the cluster has no GPU nodes",
                             "add a GPU node group to trainplane:gpuNodeGroups (eks), set "
                             "trainplane:existingGpuNodes (existing), or set gpus to 0")
    if not cluster.gpu_resources:
        raise InvalidJobArgs("gpus", a.gpus, f"no device plugin advertises the GPU nodes' {contract.GPU_RESOURCE} "
                             "(the EKS AL2023 NVIDIA AMIs ship without one), so the pods would stay Pending",
                             "add device-plugin to trainplane:addons (the NvidiaDevicePlugin add-on), or set gpus to 0")


def _check_operator(a: DistributedJobArgs, cluster: ClusterCapabilities) -> None:
    """The operator's ``--gang-scheduler-name`` is cluster-wide: with it set, every PyTorchJob gets a
    PodGroup of that scheduler; without it, none does (kubeflow/trainer v1.9.4
    ``cmd/training-operator.v1/main.go``, ``pkg/controller.v1/common/job.go``)."""
    if a.workload_backend != PYTORCHJOB:
        return
    if not cluster.training_operator:
        raise InvalidJobArgs("backend", a.workload_backend, "no Kubeflow training operator runs PyTorchJobs on "
                             "the cluster",
                             f'add training-operator to trainplane:addons, or use backend="{INDEXED_JOB}"')
    operator = cluster.operator_gang_scheduler
    wanted = NO_GANG if a.gang_scheduler == KUEUE else a.gang_scheduler
    if wanted == operator:
        return
    if operator == NO_GANG:
        problem = ("the training operator runs without --gang-scheduler-name, so it creates no PodGroup for any "
                   "PyTorchJob and the job would not be gang-scheduled")
    else:
        problem = (f"the training operator gang-schedules every PyTorchJob in the cluster with {operator} (its "
                   f"--gang-scheduler-name), this one included")
    raise InvalidJobArgs("gang_scheduler", a.gang_scheduler, problem,
                         f'set gang_scheduler="{operator}" (or "kueue" when the operator has none), set '
                         f"trainplane:trainingOperatorGangScheduler to {wanted}, or use backend=\"{INDEXED_JOB}\"")


def _check_trainer(a: DistributedJobArgs, cluster: ClusterCapabilities) -> None:
    """A TrainJob needs Kubeflow Trainer v2 and trainplane's runtime for its gang scheduler (a Kueue-queued one
    the plain runtime's: ``components.addons.trainer_runtime``)."""
    if a.workload_backend != TRAINJOB:
        return
    if cluster.trainer_runtimes is None:
        raise InvalidJobArgs("backend", a.workload_backend, "Kubeflow Trainer v2 is not installed on the cluster",
                             f'install the TrainerV2 add-on, or use backend="{INDEXED_JOB}"')
    wanted = NO_GANG if a.gang_scheduler == KUEUE else a.gang_scheduler
    if wanted not in cluster.trainer_runtimes:
        raise InvalidJobArgs("gang_scheduler", a.gang_scheduler, f"the cluster has no trainplane runtime "
                             f"{runtime_name(a.gang_scheduler)!r} for it (TrainerV2's gang_schedulers: "
                             f"{', '.join(cluster.trainer_runtimes) or 'none'})",
                             f"add {wanted} to the TrainerV2 add-on's gang_schedulers")


def _check_volcano(a: DistributedJobArgs, cluster: ClusterCapabilities, queues: bool) -> None:
    if cluster.volcano_queues is None:
        raise InvalidJobArgs("gang_scheduler", a.gang_scheduler, "Volcano is not installed on the cluster",
                             "add volcano to trainplane:addons")
    if queues and a.queue is not None and a.queue not in cluster.volcano_queues:
        raise InvalidJobArgs("queue", a.queue, "the cluster has no such Volcano queue",
                             f"use a Volcano queue the stack has: {', '.join(cluster.volcano_queues)}")


def _check_kueue(a: DistributedJobArgs, kueue: Optional[KueueCapabilities], queues: bool) -> None:
    """Kueue's rules: a disabled integration gets a no-op webhook, so the workload runs at once and
    ignores the queue (kubernetes-sigs/kueue v0.19.2 ``pkg/controller/jobframework/setup.go``); a queue
    must exist; and a workload is admitted only by one flavor that holds all it requests (v0.19.2
    ``pkg/scheduler/flavorassigner/flavorassigner.go``)."""
    if kueue is None:
        raise InvalidJobArgs("gang_scheduler", a.gang_scheduler, "Kueue is not installed on the cluster",
                             "add kueue to trainplane:addons")
    framework = KUEUE_FRAMEWORKS[a.workload_backend]
    if framework not in kueue.frameworks:
        raise InvalidJobArgs("gang_scheduler", a.gang_scheduler, f"Kueue's {framework} integration is off, so "
                             f"Kueue would let the {a.workload_backend} run at once, ignoring its queue",
                             f"enable {framework} in the Kueue add-on's frameworks (with training-operator in "
                             "trainplane:addons the stack enables kubeflow.org/pytorchjob), or use another backend")
    if not queues:
        return
    queue_name: Optional[str]
    value: Any
    if a.queue is not None:  # the queue checks run on known values (check_fits): cast from the Input types
        queue_name = kueue.local_queues.get((cast(str, a.namespace), cast(str, a.queue)))
        if queue_name is None:
            known = sorted(f"{ns}/{name}" for ns, name in kueue.local_queues) or ["none"]
            raise InvalidJobArgs("queue", a.queue, f"no LocalQueue {a.queue!r} in namespace {a.namespace!r} "
                                 f"(configured: {', '.join(known)})", "add it to trainplane:kueue.localQueues")
        field_name, value = "queue", a.queue
    else:
        queue_name, field_name, value = str(a.cluster_queue), "cluster_queue", a.cluster_queue
    queue = kueue.cluster_queues.get(queue_name)
    if queue is None:
        raise InvalidJobArgs(field_name, value, f"no ClusterQueue {queue_name!r} on the cluster",
                             f"use a ClusterQueue from trainplane:kueue.clusterQueues: "
                             f"{', '.join(sorted(kueue.cluster_queues)) or 'none'}")
    _check_quota(a, queue)


def pod_requests(a: DistributedJobArgs) -> dict[str, str]:
    """What one pod of the job requests as Kueue counts it (limits stand in for missing requests): resource
    name to quantity."""
    requests: dict[str, str] = {}
    if a.cpus is not None:
        requests["cpu"] = cpu_quantity(a.cpus)
    if a.memory is not None:
        requests["memory"] = a.memory
    if a.gpus:
        requests[contract.GPU_RESOURCE] = str(a.gpus)
    return requests


def _check_quota(a: DistributedJobArgs, queue: KueueClusterQueue) -> None:
    per_pod = pod_requests(a)
    if "pods" in queue.covered:
        per_pod["pods"] = "1"
    totals = {resource: parse_quantity(amount) * a.workers for resource, amount in per_pod.items()}
    flavors = [f for f in queue.flavors if _selects(a, f)]
    for resource, field_name in REQUEST_FIELDS:
        if resource not in totals:
            continue
        value = getattr(a, field_name)
        if resource not in queue.covered:
            raise InvalidJobArgs(field_name, value, f"ClusterQueue {queue.name!r} has no quota for {resource} (it "
                                 f"covers {', '.join(sorted(queue.covered))}), so Kueue never admits the job "
                                 f"(\"resource {resource} unavailable in ClusterQueue\")",
                                 f"add {resource} to the queue's quotas in trainplane:kueue.clusterQueues, "
                                 "or do not request it")
        if not any(_holds(f, resource, totals[resource]) for f in flavors):
            held = ", ".join(f"{f.name}: {f.quotas.get(resource, '0')}" for f in queue.flavors)
            wanted = (f"{a.workers} pods" if resource == "pods" else
                      f"{per_pod[resource]} {resource} per pod x {a.workers} pods")
            raise InvalidJobArgs(field_name, value, f"the job requests {wanted}, more than any usable flavor of "
                                 f"ClusterQueue {queue.name!r} holds ({held}), so Kueue never admits it",
                                 "raise the quota in trainplane:kueue.clusterQueues, or request less")
    if not any(all(_holds(f, r, amount) for r, amount in totals.items()) for f in flavors):
        wanted = ", ".join(f"{resource} {amount}" for resource, amount in per_pod.items())
        raise InvalidJobArgs("workers", a.workers, f"no single flavor of ClusterQueue {queue.name!r} holds "
                             f"everything the job requests ({wanted} per pod x {a.workers} pods); Kueue admits a "
                             "job from one flavor per resource group",
                             "raise the quotas of one flavor, or request less")


def _selects(a: DistributedJobArgs, flavor: KueueFlavor) -> bool:
    """Whether the pods' ``nodeSelector`` allows the flavor: it may not give a flavor label another value."""
    selector = cast(Mapping[str, str], a.node_selector)  # known when the queue checks run (check_fits)
    return all(selector.get(key, value) == value for key, value in flavor.node_labels.items())


def _holds(flavor: KueueFlavor, resource: str, amount: Decimal) -> bool:
    quota = flavor.quotas.get(resource)
    return quota is not None and amount <= parse_quantity(quota)
