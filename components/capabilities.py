"""What a cluster can run for a job: one small typed value that the job component checks against.

A job's settings depend on things only the cluster knows: whether nodes advertise ``nvidia.com/gpu``,
which gang schedulers run, how the training operator is configured (its gang scheduler applies to
every PyTorchJob in the cluster), which Volcano queues and Kueue queues exist, what the Kueue queues
hold and which Kueue integrations are on. The stack derives a :class:`ClusterCapabilities` from its
config (``components.stack.capabilities``); another Pulumi program builds one for a cluster it did not
create and passes it to ``DistributedJob(..., cluster=...)``, which refuses at preview a job that
cluster cannot run (``components.job.fit``).

Gang schedulers are named as ``DistributedJobArgs.gang_scheduler`` names them: ``none``, ``volcano``,
``scheduler-plugins``, ``kueue``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping, Optional

NO_GANG = "none"
VOLCANO = "volcano"
SCHEDULER_PLUGINS = "scheduler-plugins"
KUEUE = "kueue"
GANG_SCHEDULERS = (NO_GANG, VOLCANO, SCHEDULER_PLUGINS, KUEUE)
"""Every gang scheduler a job may name."""
OPERATOR_GANG_SCHEDULERS = (NO_GANG, VOLCANO, SCHEDULER_PLUGINS)
"""The gang schedulers the training operator can apply to PyTorchJobs (its ``--gang-scheduler-name``)."""


@dataclass(frozen=True)
class KueueFlavor:
    """One flavor of a ClusterQueue: where its pods go and how much of each resource it holds.

    Attributes:
        name: the ResourceFlavor's name.
        node_labels: the flavor's ``nodeLabels``; a pod whose ``nodeSelector`` gives one of these keys
            another value cannot use the flavor.
        quotas: resource name (``cpu``, ``memory``, ``nvidia.com/gpu``, ``pods``) to its nominal
            quota, a Kubernetes quantity.
    """

    name: str
    node_labels: Mapping[str, str] = field(default_factory=dict)
    quotas: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "node_labels", MappingProxyType(dict(self.node_labels)))
        object.__setattr__(self, "quotas", MappingProxyType({k: str(v) for k, v in self.quotas.items()}))


@dataclass(frozen=True)
class KueueClusterQueue:
    """A ClusterQueue without a cohort (it cannot borrow): its flavors, in the order Kueue tries them."""

    name: str
    flavors: tuple[KueueFlavor, ...] = ()

    @property
    def covered(self) -> frozenset[str]:
        """The resources any flavor quotes: Kueue refuses a workload requesting anything else."""
        return frozenset(r for f in self.flavors for r in f.quotas)


@dataclass(frozen=True)
class KueueCapabilities:
    """Kueue as installed: its enabled integrations and its queues.

    Attributes:
        frameworks: the ``integrations.frameworks`` of its manager config (``batch/job``,
            ``kubeflow.org/pytorchjob``, ``statefulset``, ...); Kueue leaves other kinds alone.
        cluster_queues: the ClusterQueues jobs may use, by name.
        local_queues: ``(namespace, name)`` of each LocalQueue to the ClusterQueue it feeds.
    """

    frameworks: frozenset[str] = frozenset()
    cluster_queues: Mapping[str, KueueClusterQueue] = field(default_factory=dict)
    local_queues: Mapping[tuple[str, str], str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "frameworks", frozenset(self.frameworks))
        object.__setattr__(self, "cluster_queues", MappingProxyType(dict(self.cluster_queues)))
        object.__setattr__(self, "local_queues", MappingProxyType(dict(self.local_queues)))


@dataclass(frozen=True)
class NodeGroupCapabilities:
    """One GPU node group a job may name as its ``node_group``.

    Attributes:
        name: the group's name (its nodes' ``trainplane.dev/node-group`` label).
        instance_types: its EC2 instance types.
        efa: its nodes have EFA interfaces (and the EFA device plugin runs).
    """

    name: str
    instance_types: tuple[str, ...] = ()
    efa: bool = False


@dataclass(frozen=True)
class ClusterCapabilities:
    """What the cluster a job targets provides.

    Attributes:
        gpu_nodes: the cluster has NVIDIA GPU nodes (tainted ``nvidia.com/gpu``).
        gpu_resources: their GPUs are advertised as ``nvidia.com/gpu`` (a device plugin runs; the
            EKS AL2023 NVIDIA AMIs ship without one).
        training_operator: the Kubeflow training operator runs (PyTorchJob).
        operator_gang_scheduler: the operator's gang scheduler, which it applies to every PyTorchJob:
            ``none``, ``volcano`` or ``scheduler-plugins``.
        volcano_queues: the Volcano queues jobs may submit to; ``None`` when Volcano is not installed.
        scheduler_plugins: the scheduler-plugins coscheduling scheduler runs.
        kueue: Kueue as installed, or ``None``.
        node_groups: the GPU node groups by name; ``None`` when not known (a cluster trainplane did not make).
        storage_classes: the StorageClasses jobs' claims may name, each with the access modes its volumes
            support; ``None`` when not known.
        default_storage_class: the class a claim without ``storageClassName`` gets, if any.
        trainer_runtimes: the gang schedulers (``none``, ``volcano``, ``scheduler-plugins``) trainplane's
            ClusterTrainingRuntimes exist for (the ``TrainerV2`` add-on's ``gang_schedulers``); ``None`` when
            Kubeflow Trainer v2 is not installed.
    """

    gpu_nodes: bool = False
    gpu_resources: bool = False
    training_operator: bool = False
    operator_gang_scheduler: str = NO_GANG
    volcano_queues: Optional[tuple[str, ...]] = None
    scheduler_plugins: bool = False
    kueue: Optional[KueueCapabilities] = None
    node_groups: Optional[Mapping[str, NodeGroupCapabilities]] = None
    storage_classes: Optional[Mapping[str, tuple[str, ...]]] = None
    default_storage_class: Optional[str] = None
    trainer_runtimes: Optional[tuple[str, ...]] = None
