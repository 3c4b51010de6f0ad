"""The typed stack config: cluster, add-ons and jobs, validated as a whole before anything is created.

Every error is a ``StackConfigError`` naming the config key (``trainplane:...``), the value and
the fix, raised while ``pulumi preview`` runs the program.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable, Optional

from components.addons import (
    ClusterQueueArgs,
    KueueArgs,
    LocalQueueArgs,
    NvidiaDevicePluginArgs,
    ResourceFlavorArgs,
    TrainingOperatorArgs,
    VolcanoArgs,
)
from components.addons.versions import VOLCANO_SCHEDULER
from components.cluster import (
    ClusterArgs,
    EksGpuClusterArgs,
    ExistingClusterArgs,
    GpuNodeGroupArgs,
    KindClusterArgs,
)
from components.cluster.existing import load_kubeconfig
from components.errors import ArgumentError, StackConfigError
from components.job import DistributedJobArgs
from components.job.args import KUEUE, PYTORCHJOB, SCHEDULER_PLUGINS, VOLCANO, validate_job_name
from components.stack import keys
from components.stack.keys import build, full_key, translate

CLUSTER_KEYS: dict[str, tuple[type, dict[str, str]]] = {
    "kind": (
        KindClusterArgs,
        {
            "clusterName": "cluster_name",
            "kindWorkers": "workers",
            "kindNodeImage": "node_image",
            "kindImages": "load_images",
        },
    ),
    "eks": (
        EksGpuClusterArgs,
        {
            "eksVersion": "version",
            "vpcId": "vpc_id",
            "vpcCidr": "vpc_cidr",
            "publicSubnetIds": "public_subnet_ids",
            "privateSubnetIds": "private_subnet_ids",
            "availabilityZones": "availability_zones",
            "systemInstanceType": "system_instance_type",
            "systemNodes": "system_nodes",
            "gpuNodeGroups": "gpu_node_groups",
        },
    ),
    "existing": (
        ExistingClusterArgs,
        {"kubeconfig": "kubeconfig", "kubeContext": "context", "existingGpuNodes": "gpu_nodes"},
    ),
}
"""Per cluster kind: its args class, and which config key sets which argument."""

DEVICE_PLUGIN = "device-plugin"
TRAINING_OPERATOR = "training-operator"
VOLCANO_ADDON = "volcano"
KUEUE_ADDON = "kueue"
ADDONS = (DEVICE_PLUGIN, TRAINING_OPERATOR, VOLCANO_ADDON, KUEUE_ADDON)


@dataclass(frozen=True)
class AddonsConfig:
    """The add-ons to install; None means not installed."""

    device_plugin: Optional[NvidiaDevicePluginArgs] = None
    training_operator: Optional[TrainingOperatorArgs] = None
    volcano: Optional[VolcanoArgs] = None
    kueue: Optional[KueueArgs] = None


@dataclass(frozen=True)
class JobConfig:
    """One job of the stack: its name (also its Kubernetes name) and arguments."""

    name: str
    args: DistributedJobArgs


@dataclass(frozen=True)
class StackConfig:
    """Everything ``__main__.py`` builds."""

    cluster: ClusterArgs
    addons: AddonsConfig
    jobs: tuple[JobConfig, ...]


def parse_stack_config(get: Callable[[str], Optional[str]]) -> StackConfig:
    """Read, decode and validate the stack config.

    Args:
        get: Returns a key's raw value or None (``pulumi.Config().get``).

    Returns:
        The validated config.

    Raises:
        StackConfigError: The first invalid value, with its key, the value and the fix.
    """
    raw = keys.read(get)
    cluster = parse_cluster(raw)
    addons = parse_addons(raw)
    jobs = parse_jobs(raw.get("jobs") or [])
    for i, job in enumerate(jobs):
        check_job_fits(i, job, cluster, addons)
    return StackConfig(cluster=cluster, addons=addons, jobs=jobs)


def parse_cluster(raw: Mapping[str, Any]) -> ClusterArgs:
    """Build the cluster args selected by ``clusterKind`` from its flat keys.

    Raises:
        StackConfigError: Unknown kind, node groups on a cluster that has none, a bad value, or
            (existing clusters) a kubeconfig that cannot be read or lacks the context.
    """
    kind = raw.get("clusterKind")
    if kind not in CLUSTER_KEYS:
        raise StackConfigError(full_key("clusterKind"), kind, f"use one of {', '.join(CLUSTER_KEYS)}")
    if kind != "eks" and raw.get("gpuNodeGroups"):
        raise StackConfigError(
            full_key("gpuNodeGroups"), raw["gpuNodeGroups"], "only eks clusters have node groups; remove it"
        )
    cls, names = CLUSTER_KEYS[kind]
    kwargs = {arg: raw[key] for key, arg in names.items() if raw.get(key) is not None}
    if kind == "eks":
        kwargs["gpu_node_groups"] = [
            build(GpuNodeGroupArgs, group, f"gpuNodeGroups[{i}]")
            for i, group in enumerate(raw.get("gpuNodeGroups") or [])
        ]
    try:
        args = cls(**kwargs)
        if isinstance(args, ExistingClusterArgs):
            load_kubeconfig(args)
    except ArgumentError as exc:
        raise translate(exc, "", {arg: key for key, arg in names.items()}) from exc
    return args


def parse_addons(raw: Mapping[str, Any]) -> AddonsConfig:
    """Build the add-on args from ``addons`` (names), ``volcanoQueue`` and ``kueue``.

    Raises:
        StackConfigError: Unknown add-on, Kueue queues without the Kueue add-on, or a bad value.
    """
    names = raw.get("addons") or []
    for name in names:
        if name not in ADDONS:
            raise StackConfigError(full_key("addons"), name, f"use add-ons from {', '.join(ADDONS)}")
    if raw.get("kueue") is not None and KUEUE_ADDON not in names:
        raise StackConfigError(full_key("kueue"), raw["kueue"], "add kueue to trainplane:addons or remove this key")
    volcano = None
    if VOLCANO_ADDON in names:
        try:
            volcano = VolcanoArgs(queue=raw.get("volcanoQueue") or VolcanoArgs.queue)
        except ArgumentError as exc:
            raise translate(exc, "", {"queue": "volcanoQueue"}) from exc
    operator = None
    if TRAINING_OPERATOR in names:
        operator = TrainingOperatorArgs(gang_scheduler_name=VOLCANO_SCHEDULER if volcano else None)
    return AddonsConfig(
        device_plugin=NvidiaDevicePluginArgs() if DEVICE_PLUGIN in names else None,
        training_operator=operator,
        volcano=volcano,
        kueue=parse_kueue(raw.get("kueue") or {}) if KUEUE_ADDON in names else None,
    )


def parse_kueue(raw: Any) -> KueueArgs:
    """Build ``KueueArgs`` from the ``kueue`` object (``flavors``, ``clusterQueues``, ``localQueues``).

    Raises:
        StackConfigError: An unknown key, a missing one, or a value the args reject.
    """
    parts = {"flavors": ResourceFlavorArgs, "clusterQueues": ClusterQueueArgs, "localQueues": LocalQueueArgs}
    if not isinstance(raw, Mapping):
        raise StackConfigError(full_key("kueue"), raw, f"use an object with keys from {sorted(parts)}")
    items: dict[str, Sequence[Any]] = {}
    for key, value in raw.items():
        if key not in parts:
            raise StackConfigError(full_key(f"kueue.{key}"), value, f"unknown key; use one of {sorted(parts)}")
        if not isinstance(value, list):
            raise StackConfigError(full_key(f"kueue.{key}"), value, "use a list of objects")
        items[key] = [build(parts[key], item, f"kueue.{key}[{i}]") for i, item in enumerate(value)]
    try:
        return KueueArgs(
            flavors=items.get("flavors", ()),
            cluster_queues=items.get("clusterQueues", ()),
            local_queues=items.get("localQueues", ()),
        )
    except ArgumentError as exc:
        raise translate(exc, "kueue.", {}) from exc


def parse_jobs(raw: Any) -> tuple[JobConfig, ...]:
    """Build every job from the ``jobs`` list: ``name`` plus ``DistributedJobArgs`` fields in camelCase.

    Raises:
        StackConfigError: A job without a unique valid name, or a value the job args reject.
    """
    jobs = []
    for i, item in enumerate(raw):
        path = f"jobs[{i}]"
        if not isinstance(item, Mapping):
            raise StackConfigError(full_key(path), item, "use an object with a name and the job's arguments")
        name = item.get("name")
        if not isinstance(name, str) or any(job.name == name for job in jobs):
            raise StackConfigError(full_key(f"{path}.name"), name, "give every job its own name")
        args = build(DistributedJobArgs, item, path, drop=("name",))
        try:
            validate_job_name(name, args)
        except ArgumentError as exc:
            raise translate(exc, f"{path}.", {}) from exc
        jobs.append(JobConfig(name=name, args=args))
    return tuple(jobs)


def check_job_fits(index: int, job: JobConfig, cluster: ClusterArgs, addons: AddonsConfig) -> None:
    """Check that the cluster and add-ons can run ``job``.

    Raises:
        StackConfigError: GPUs on a cluster without GPU nodes, a gang scheduler or queue that is not
            installed or configured, or a PyTorchJob without the training operator.
    """
    args, path = job.args, f"jobs[{index}]"
    if args.gpus and not cluster.gpu_nodes:
        raise StackConfigError(
            full_key(f"{path}.gpus"),
            args.gpus,
            "the cluster has no GPU nodes: add a GPU node group to trainplane:gpuNodeGroups (eks), "
            "set trainplane:existingGpuNodes (existing), or set gpus to 0",
        )
    if args.workload_backend == PYTORCHJOB and addons.training_operator is None:
        raise StackConfigError(
            full_key(f"{path}.backend"), args.backend, f"add {TRAINING_OPERATOR} to trainplane:addons"
        )
    if args.gang_scheduler == VOLCANO:
        _check_volcano(path, args, addons.volcano)
    elif args.gang_scheduler == KUEUE:
        _check_kueue(path, args, addons.kueue)
    elif args.gang_scheduler == SCHEDULER_PLUGINS and not isinstance(cluster, ExistingClusterArgs):
        raise StackConfigError(
            full_key(f"{path}.gangScheduler"),
            args.gang_scheduler,
            "trainplane does not install scheduler-plugins; use volcano or kueue, or a cluster that has it",
        )


def _check_volcano(path: str, args: DistributedJobArgs, volcano: Optional[VolcanoArgs]) -> None:
    if volcano is None:
        raise StackConfigError(
            full_key(f"{path}.gangScheduler"), args.gang_scheduler, "add volcano to trainplane:addons"
        )
    if args.queue is not None and args.queue not in volcano.queues:
        raise StackConfigError(
            full_key(f"{path}.queue"),
            args.queue,
            f"use a Volcano queue the stack has: {', '.join(volcano.queues)}",
        )


def _check_kueue(path: str, args: DistributedJobArgs, kueue: Optional[KueueArgs]) -> None:
    if kueue is None:
        raise StackConfigError(full_key(f"{path}.gangScheduler"), args.gang_scheduler, "add kueue to trainplane:addons")
    if args.queue is not None and not kueue.has_local_queue(args.namespace, args.queue):
        known = [f"{q.namespace}/{q.name}" for q in kueue.local_queues] or ["none"]
        raise StackConfigError(
            full_key(f"{path}.queue"),
            args.queue,
            f"no LocalQueue {args.queue!r} in namespace {args.namespace!r} (configured: {', '.join(known)}); "
            "add it to trainplane:kueue.localQueues",
        )
    cluster_queues = [q.name for q in kueue.cluster_queues]
    if args.cluster_queue is not None and args.cluster_queue not in cluster_queues:
        raise StackConfigError(
            full_key(f"{path}.clusterQueue"),
            args.cluster_queue,
            f"use a ClusterQueue from trainplane:kueue.clusterQueues: {', '.join(cluster_queues) or 'none'}",
        )
