"""Gang scheduling: PodGroups (Volcano, scheduler-plugins), Kueue queues, and what pods need to join them.

A gang scheduler starts a job's pods all together or not at all, so a half-scheduled job cannot
hold GPUs while it waits for quorum. ``minMember`` is the job's quorum. A PyTorchJob and a TrainJob are
the exceptions: with gang scheduling enabled the training operator creates the PodGroup and sets the
scheduler itself from ``runPolicy.schedulingPolicy``, and the Trainer from its runtime's
``podGroupPolicy``, so no PodGroup is rendered for them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Optional

import pulumi

from components.addons.versions import KUEUE_API, SCHEDULER_PLUGINS_SCHEDULER, VOLCANO_API, VOLCANO_SCHEDULER
from components.capabilities import KUEUE, NO_GANG, SCHEDULER_PLUGINS, VOLCANO
from components.job.args import DistributedJobArgs
from components.job.backends import PYTORCHJOB, TRAINJOB
from components.job.naming import JobNames
from components.outputs import Labels, merged

COSCHEDULING_API = "scheduling.x-k8s.io/v1alpha1"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
COSCHEDULING_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
DEFAULT_SCHEDULER_NAMES = {VOLCANO: VOLCANO_SCHEDULER, SCHEDULER_PLUGINS: SCHEDULER_PLUGINS_SCHEDULER}
"""Scheduler names the Volcano and scheduler-plugins (second-scheduler) Helm charts register."""


@dataclass(frozen=True)
class GangPlacement:
    """What the workload and its pods carry to join the gang scheduler.

    Attributes:
        scheduler_name: pod ``schedulerName``; ``None`` leaves the default (or the operator's).
        pod_labels: labels on every pod.
        pod_annotations: annotations on every pod.
        workload_labels: labels on the workload object itself (Kueue reads them there).
    """

    scheduler_name: Optional[pulumi.Input[str]] = None
    pod_labels: Mapping[str, str] = field(default_factory=dict)
    pod_annotations: Mapping[str, str] = field(default_factory=dict)
    workload_labels: Mapping[str, pulumi.Input[str]] = field(default_factory=dict)


def operator_schedules(args: DistributedJobArgs) -> bool:
    """Whether an operator owns the PodGroup and the pods' place in it: the training operator for a PyTorchJob,
    the Trainer's podGroupPolicy for a TrainJob (``components.addons.trainer_runtime``), under Volcano or
    scheduler-plugins."""
    return args.workload_backend in (PYTORCHJOB, TRAINJOB) and args.gang_scheduler in (VOLCANO, SCHEDULER_PLUGINS)


def kueue_queue(names: JobNames, args: DistributedJobArgs) -> pulumi.Input[str]:
    """The LocalQueue the job is submitted to: ``queue``, or the job's own when ``cluster_queue`` is set."""
    return args.queue if args.queue is not None else names.job


def placement(names: JobNames, args: DistributedJobArgs) -> GangPlacement:
    """How the job's pods and workload join ``args.gang_scheduler``."""
    scheduler = args.scheduler_name
    if args.gang_scheduler == NO_GANG or operator_schedules(args):
        return GangPlacement(scheduler_name=scheduler)
    if args.gang_scheduler == KUEUE:
        queue_label = {KUEUE_QUEUE_LABEL: kueue_queue(names, args)}
        return GangPlacement(scheduler_name=scheduler, workload_labels=queue_label)
    scheduler = scheduler or DEFAULT_SCHEDULER_NAMES[args.gang_scheduler]
    if args.gang_scheduler == VOLCANO:
        return GangPlacement(scheduler_name=scheduler, pod_annotations={VOLCANO_GROUP_ANNOTATION: names.job})
    return GangPlacement(scheduler_name=scheduler, pod_labels={COSCHEDULING_GROUP_LABEL: names.job})


def podgroup_manifest(names: JobNames, args: DistributedJobArgs, labels: Labels) -> Optional[dict]:
    """The PodGroup for Volcano or scheduler-plugins, or ``None`` when no PodGroup is needed.

    ``minMember`` is the quorum; scheduler-plugins also gets ``scheduleTimeoutSeconds`` equal to the
    quorum timeout (rounded up), after which it gives up on a partial gang.
    """
    if args.gang_scheduler not in (VOLCANO, SCHEDULER_PLUGINS) or operator_schedules(args):
        return None
    spec: dict = {"minMember": args.quorum}
    if args.gang_scheduler == VOLCANO:
        api = VOLCANO_API
        if args.queue is not None:
            spec["queue"] = args.queue
    else:
        api = COSCHEDULING_API
        spec["scheduleTimeoutSeconds"] = math.ceil(args.quorum_timeout)
    return {
        "apiVersion": api,
        "kind": "PodGroup",
        "metadata": {"name": names.job, "namespace": names.namespace, "labels": merged(labels)},
        "spec": spec,
    }


def local_queue_manifest(
    names: JobNames, args: DistributedJobArgs, labels: Labels
) -> Optional[dict]:
    """The job's own Kueue LocalQueue when ``cluster_queue`` is set, else ``None``."""
    if args.cluster_queue is None:
        return None
    return {
        "apiVersion": KUEUE_API,
        "kind": "LocalQueue",
        "metadata": {"name": kueue_queue(names, args), "namespace": names.namespace, "labels": merged(labels)},
        "spec": {"clusterQueue": args.cluster_queue},
    }


def pytorch_scheduling_policy(args: DistributedJobArgs) -> Optional[dict]:
    """``runPolicy.schedulingPolicy`` for an operator-scheduled PyTorchJob, else ``None``."""
    if not operator_schedules(args):
        return None
    policy: dict = {"minAvailable": args.quorum}
    if args.queue is not None:
        policy["queue"] = args.queue
    if args.gang_scheduler == SCHEDULER_PLUGINS:
        policy["scheduleTimeoutSeconds"] = math.ceil(args.quorum_timeout)
    return policy
