"""The typed stack config: cluster, add-ons and jobs, validated as a whole before anything is created.

Every error is a ``StackConfigError`` naming the config key (``trainplane:...``), the value, the
problem and the fix, raised while ``pulumi preview`` runs the program.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable, Optional

from components import validate
from components.addons import (
    ClusterQueueArgs,
    KueueArgs,
    LocalQueueArgs,
    NvidiaDevicePluginArgs,
    ResourceFlavorArgs,
    TrainerV2Args,
    TrainingOperatorArgs,
    VolcanoArgs,
)
from components.addons.kueue import PYTORCHJOB_FRAMEWORK
from components.capabilities import NO_GANG, SCHEDULER_PLUGINS, VOLCANO, ClusterCapabilities
from components.cluster import (
    ClusterArgs,
    EksGpuClusterArgs,
    ExistingClusterArgs,
    GpuNodeGroupArgs,
    KindClusterArgs,
)
from components.cluster.existing import load_kubeconfig
from components.errors import ArgumentError, InvalidJobArgs, StackConfigError
from components.job import DistributedJobArgs
from components.job.fit import check_fits
from components.job.naming import validate_job_name
from components.stack import keys
from components.stack.addons import AddonsConfig
from components.stack.capabilities import cluster_capabilities
from components.stack.keys import REQUIRED, build, full_key, not_a_key, not_an_object, not_installed, translate
from runtime.agent.spec import setting
from runtime.agent.spec.job import SETTINGS

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
            "eksStorage": "storage",
            "eksAutoscaler": "autoscaler",
            "eksClusterName": "cluster_name",
        },
    ),
    "existing": (
        ExistingClusterArgs,
        {"kubeconfig": "kubeconfig", "kubeContext": "context", "existingGpuNodes": "gpu_nodes",
         "existingStorageClasses": "storage_classes", "existingDefaultStorageClass": "default_storage_class"},
    ),
}
"""Per cluster kind: its args class, and which config key sets which argument."""

DEVICE_PLUGIN = "device-plugin"
TRAINING_OPERATOR = "training-operator"
VOLCANO_ADDON = "volcano"
KUEUE_ADDON = "kueue"
TRAINER_ADDON = "trainer"
ADDONS = (DEVICE_PLUGIN, TRAINING_OPERATOR, VOLCANO_ADDON, KUEUE_ADDON, TRAINER_ADDON)
ATOMIC_SCALE_UP_KEY = "atomicScaleUp"
"""The ``kueue`` object's key for the add-on's ``atomic_scale_up`` (with it, the EKS autoscaler's
``provisioning_requests``)."""
LOCAL_COPY_FIELDS = {
    DEVICE_PLUGIN: ("device_plugin", "chart_path"),
    TRAINING_OPERATOR: ("training_operator", "manifests_path"),
    VOLCANO_ADDON: ("volcano", "chart_path"),
    KUEUE_ADDON: ("kueue", "chart_path"),
    TRAINER_ADDON: ("trainer", "chart_path"),
}
"""Per add-on of ``addonCopies``: its ``AddonsConfig`` attribute and the argument that takes a local copy (a chart
directory or ``.tgz`` for the Helm add-ons, the standalone overlay for the training operator)."""


@dataclass(frozen=True)
class JobConfig:
    """One job of the stack: its name (also its Kubernetes name) and arguments."""

    name: str
    args: DistributedJobArgs


@dataclass(frozen=True)
class StackConfig:
    """Everything ``__main__.py`` builds, and what the cluster will provide its jobs."""

    cluster: ClusterArgs
    addons: AddonsConfig
    jobs: tuple[JobConfig, ...]
    capabilities: ClusterCapabilities


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
    addons = parse_addons(raw, cluster)
    jobs = parse_jobs(raw.get("jobs") or [], cluster)
    cluster = with_pod_identity(cluster, jobs)
    cluster = with_provisioning_requests(cluster, addons)
    capabilities = cluster_capabilities(cluster, addons)
    for i, job in enumerate(jobs):
        check_job_fits(i, job, capabilities)
    return StackConfig(cluster=cluster, addons=addons, jobs=jobs, capabilities=capabilities)


def parse_cluster(raw: Mapping[str, Any]) -> ClusterArgs:
    """Build the cluster args selected by ``clusterKind`` from its flat keys.

    Raises:
        StackConfigError: Unknown kind, node groups on a cluster that has none, a bad value, or
            (existing clusters) a kubeconfig that cannot be read or lacks the context.
    """
    kind = raw.get("clusterKind")
    validate.require(full_key("clusterKind"), kind, setting.one_of(tuple(CLUSTER_KEYS)), StackConfigError)
    if kind != "eks" and raw.get("gpuNodeGroups"):
        raise StackConfigError(full_key("gpuNodeGroups"), raw["gpuNodeGroups"],
                               f"only eks clusters have node groups (clusterKind {kind!r})", "remove it")
    cls, names = CLUSTER_KEYS[str(kind)]  # one of its keys, checked above
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


def parse_addons(raw: Mapping[str, Any], cluster: ClusterArgs) -> AddonsConfig:
    """Build the add-on args from ``addons`` (names), ``volcanoQueue``, ``trainingOperatorGangScheduler``
    and ``kueue``.

    The add-ons are configured for each other: the training operator gang-schedules PyTorchJobs with
    Volcano when the stack installs Volcano (unless ``trainingOperatorGangScheduler`` says otherwise),
    and Kueue queues PyTorchJobs when the stack installs the training operator; Kubeflow Trainer v2 gets a
    runtime for Volcano when the stack installs it.

    Raises:
        StackConfigError: Unknown add-on, settings of an add-on that is not installed, a gang scheduler
            for the operator that the cluster does not run, ``kueue.atomicScaleUp`` where no Cluster
            Autoscaler of the stack's would act on it (:func:`check_atomic_scale_up`), or a bad value.
    """
    names = raw.get("addons") or []
    for name in names:
        validate.require(full_key("addons"), name, setting.one_of(ADDONS), StackConfigError)
    if raw.get("kueue") is not None and KUEUE_ADDON not in names:
        raise not_installed("kueue", raw["kueue"], KUEUE_ADDON, "key")
    volcano = None
    if VOLCANO_ADDON in names:
        try:
            volcano = VolcanoArgs(queue=raw.get("volcanoQueue") or VolcanoArgs.queue)
        except ArgumentError as exc:
            raise translate(exc, "", {"queue": "volcanoQueue"}) from exc
    operator = parse_operator(raw, names, cluster, volcano)
    kueue = None
    if KUEUE_ADDON in names:
        kueue = parse_kueue(raw.get("kueue") or {})
        check_atomic_scale_up(kueue, cluster)
        if operator is not None and PYTORCHJOB_FRAMEWORK not in kueue.frameworks:
            kueue = dataclasses.replace(kueue, frameworks=(*kueue.frameworks, PYTORCHJOB_FRAMEWORK))
    trainer = None
    if TRAINER_ADDON in names:  # a runtime for each gang scheduler the stack installs (Kueue uses the plain one)
        trainer = TrainerV2Args(gang_schedulers=(NO_GANG, VOLCANO) if volcano is not None else (NO_GANG,))
    return with_local_copies(raw.get("addonCopies") or {}, names, AddonsConfig(
        device_plugin=device_plugin_args(cluster) if DEVICE_PLUGIN in names else None,
        training_operator=operator,
        volcano=volcano,
        kueue=kueue,
        trainer=trainer,
    ))


def with_local_copies(copies: Mapping[str, Any], names: Sequence[str], addons: AddonsConfig) -> AddonsConfig:
    """The add-ons with the local copies ``addonCopies`` names (add-on name to path, relative to the program's
    directory) in place of their repositories' charts or overlay, each checked against the add-on's pin.

    Raises:
        StackConfigError: A copy for an add-on the stack does not install, or one that is not a copy of the pinned
            chart or overlay (``trainplane:addonCopies.<add-on>``).
    """
    for name, path in copies.items():
        if name not in names:
            raise not_installed(f"addonCopies.{name}", path, name, "entry")
        attribute, field = LOCAL_COPY_FIELDS[name]
        try:
            addons = dataclasses.replace(addons, **{
                attribute: dataclasses.replace(getattr(addons, attribute), **{field: path})})
        except ArgumentError as exc:
            raise StackConfigError(full_key(f"addonCopies.{name}"), path, exc.problem, exc.fix) from exc
    return addons


def device_plugin_args(cluster: ClusterArgs) -> NvidiaDevicePluginArgs:
    """The NVIDIA device plugin's args: MOFED off on an EKS cluster with EFA groups, where it would take the
    ``uverbs`` devices the EFA device plugin hands out."""
    efa = isinstance(cluster, EksGpuClusterArgs) and cluster.efa
    return NvidiaDevicePluginArgs(mofed_enabled=False) if efa else NvidiaDevicePluginArgs()


def parse_operator(
    raw: Mapping[str, Any], names: Sequence[str], cluster: ClusterArgs, volcano: Optional[VolcanoArgs]
) -> Optional[TrainingOperatorArgs]:
    """The training operator's args, its gang scheduler from ``trainingOperatorGangScheduler`` (default:
    ``volcano`` when the stack installs Volcano, else ``none``).

    Raises:
        StackConfigError: The key without the operator, an unknown value, or a scheduler the cluster
            does not run (the operator exits at start-up without its PodGroup CRD).
    """
    key = "trainingOperatorGangScheduler"
    value = raw.get(key)
    if TRAINING_OPERATOR not in names:
        if value is not None:
            raise not_installed(key, value, TRAINING_OPERATOR, "key")
        return None
    gang = value if value is not None else (VOLCANO if volcano is not None else NO_GANG)
    try:
        operator = TrainingOperatorArgs.for_gang_scheduler(gang)
    except ArgumentError as exc:
        raise translate(exc, "", {"gang_scheduler": key}) from exc
    if gang == VOLCANO and volcano is None:
        raise StackConfigError(full_key(key), gang, "names volcano, which trainplane:addons does not install",
                               "add volcano to trainplane:addons, or use none")
    if gang == SCHEDULER_PLUGINS and not isinstance(cluster, ExistingClusterArgs):
        raise StackConfigError(full_key(key), gang, "trainplane does not install scheduler-plugins",
                               "use volcano or none, or an existing cluster that runs it")
    return operator


def parse_kueue(raw: Any) -> KueueArgs:
    """Build ``KueueArgs`` from the ``kueue`` object (``flavors``, ``clusterQueues``, ``localQueues``, and
    ``atomicScaleUp``, a boolean).

    Raises:
        StackConfigError: An unknown key, a missing one, or a value the args reject.
    """
    parts = {"flavors": ResourceFlavorArgs, "clusterQueues": ClusterQueueArgs, "localQueues": LocalQueueArgs}
    known = sorted([*parts, ATOMIC_SCALE_UP_KEY])
    if not isinstance(raw, Mapping):
        raise not_an_object("kueue", raw, known)
    items: dict[str, Sequence[Any]] = {}
    for key, value in raw.items():
        if key == ATOMIC_SCALE_UP_KEY:
            continue
        if key not in parts:
            raise not_a_key("kueue", key, value, known)
        if not isinstance(value, list):
            raise StackConfigError.of(full_key(f"kueue.{key}"), value, "must be a list", "use a list of objects")
        items[key] = [build(parts[key], item, f"kueue.{key}[{i}]") for i, item in enumerate(value)]
    try:
        return KueueArgs(
            flavors=items.get("flavors", ()),
            cluster_queues=items.get("clusterQueues", ()),
            local_queues=items.get("localQueues", ()),
            atomic_scale_up=raw.get(ATOMIC_SCALE_UP_KEY, False),
        )
    except ArgumentError as exc:
        raise translate(exc, "kueue.", {}) from exc


def check_atomic_scale_up(kueue: KueueArgs, cluster: ClusterArgs) -> None:
    """Refuse ``kueue.atomicScaleUp`` where no Cluster Autoscaler handles ProvisioningRequests: kind has no
    autoscaler, an existing cluster's is not the stack's to configure, and an EKS one needs ``eksAutoscaler``.

    Raises:
        StackConfigError: On ``trainplane:kueue.atomicScaleUp``, saying what to set instead.
    """
    if not kueue.atomic_scale_up:
        return
    key = full_key(f"kueue.{ATOMIC_SCALE_UP_KEY}")
    if isinstance(cluster, KindClusterArgs):
        raise StackConfigError(key, True, "kind has no Cluster Autoscaler to make ProvisioningRequests' nodes",
                               "remove it (or use an eks stack with trainplane:eksAutoscaler)")
    if isinstance(cluster, ExistingClusterArgs):
        raise StackConfigError(key, True, "the stack does not configure an existing cluster's autoscaler",
                               "remove it, or use the Kueue component (atomic_scale_up) in a program of your own on "
                               "a cluster whose Cluster Autoscaler runs --enable-provisioning-requests")
    if isinstance(cluster, EksGpuClusterArgs) and not cluster.autoscaler:
        raise StackConfigError(key, True, "ProvisioningRequests are the Cluster Autoscaler's, and "
                               "trainplane:eksAutoscaler is off", "set trainplane:eksAutoscaler: true, or remove it")


def with_provisioning_requests(cluster: ClusterArgs, addons: AddonsConfig) -> ClusterArgs:
    """An EKS cluster whose autoscaler handles ProvisioningRequests when Kueue's ``atomicScaleUp`` is on."""
    if isinstance(cluster, EksGpuClusterArgs) and addons.kueue is not None and addons.kueue.atomic_scale_up:
        return dataclasses.replace(cluster, provisioning_requests=True)
    return cluster


def parse_jobs(raw: Any, cluster: Optional[ClusterArgs] = None) -> tuple[JobConfig, ...]:
    """Build every job from the ``jobs`` list: ``name`` plus ``DistributedJobArgs`` fields in camelCase. On an
    EKS cluster a job that binds an IAM role by pod identity gets the cluster's name (``eksClusterName``).

    Raises:
        StackConfigError: A job without a unique valid name, a pod identity role on an EKS cluster without
            ``eksClusterName``, or a value the job args reject.
    """
    jobs: list[JobConfig] = []
    for i, item in enumerate(raw):
        path = f"jobs[{i}]"
        if not isinstance(item, Mapping):
            raise StackConfigError.of(full_key(path), item, "must be an object",
                                      "use an object with a name and the job's arguments")
        name = item.get("name")  # the job spec's job name (text), named once among the stack's jobs
        found = REQUIRED if name is None else (SETTINGS["job_name"].problem(name)
                                               or validate.NAMED_ONCE([*(job.name for job in jobs), name]))
        if found is not None or not isinstance(name, str):
            raise StackConfigError.of(full_key(f"{path}.name"), name, *(found or REQUIRED))
        args = build(DistributedJobArgs, _with_cluster_name(item, path, cluster), path, drop=("name",))
        try:
            validate_job_name(name, args)
        except ArgumentError as exc:
            raise translate(exc, f"{path}.", {}) from exc
        jobs.append(JobConfig(name=name, args=args))
    return tuple(jobs)


def _with_cluster_name(item: Mapping[str, Any], path: str, cluster: Optional[ClusterArgs]) -> Mapping[str, Any]:
    """``item`` with ``eksClusterName`` set from an EKS cluster's, when it binds a role by pod identity."""
    binds = item.get("iamRoleArn") is not None and item.get("iamBinding", "pod-identity") == "pod-identity"
    if not (binds and isinstance(cluster, EksGpuClusterArgs)) or item.get("eksClusterName") is not None:
        return item
    if cluster.cluster_name is None:
        raise StackConfigError(full_key(f"{path}.iamRoleArn"), item["iamRoleArn"], "a pod identity association "
                               "names its EKS cluster, and trainplane:eksClusterName is unset",
                               "set trainplane:eksClusterName (or iamBinding: irsa)")
    return {**item, "eksClusterName": cluster.cluster_name}


def with_pod_identity(cluster: ClusterArgs, jobs: Sequence[JobConfig]) -> ClusterArgs:
    """An EKS cluster with the pod identity agent on when a job binds its role by pod identity."""
    if isinstance(cluster, EksGpuClusterArgs) and any(
            j.args.iam_role_arn is not None and j.args.iam_binding == "pod-identity" for j in jobs):
        return dataclasses.replace(cluster, pod_identity=True)
    return cluster


def check_job_fits(index: int, job: JobConfig, capabilities: ClusterCapabilities) -> None:
    """Check that the stack's cluster and add-ons can run ``job`` (``components.job.fit``).

    Raises:
        StackConfigError: The job's first setting the cluster cannot honour, on its config key.
    """
    try:
        check_fits(job.args, capabilities)
    except InvalidJobArgs as exc:
        raise translate(exc, f"jobs[{index}].", {}) from exc
