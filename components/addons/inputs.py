"""The add-ons' arguments as Pulumi declares a component's inputs: one TypedDict per add-on (and per Kueue
object), one key per field of the add-on's args dataclass, documented by the docstring under it.

The ``trainplane`` package's schema is inferred from these (``components.package``); each args dataclass
takes its field documentation from here. Every argument is plain: an add-on's settings shape the cluster
software it installs (chart values, queues, flags), which Pulumi must know when the add-on is created.

No ``from __future__ import annotations`` here: the analyzer reads the annotations at run time.
"""

from collections.abc import Mapping, Sequence
from typing import Any, Optional, TypedDict

from typing_extensions import NotRequired


class NvidiaDevicePluginArgsDict(TypedDict):
    """The arguments of the NVIDIA device plugin add-on."""

    namespace: NotRequired[str]
    """Namespace of the release. Default: ``"nvidia-device-plugin"``."""


class VolcanoArgsDict(TypedDict):
    """The arguments of the Volcano add-on."""

    queue: NotRequired[str]
    """Name of the Queue created for trainplane jobs. Default: ``"trainplane"``."""
    queue_weight: NotRequired[int]
    """The queue's share of the cluster relative to other queues' weights. Default: ``1``."""
    namespace: NotRequired[str]
    """Namespace of the release. Default: ``"volcano-system"``."""


class TrainingOperatorArgsDict(TypedDict):
    """The arguments of the Kubeflow training operator add-on."""

    gang_scheduler_name: NotRequired[Optional[str]]
    """Value of ``--gang-scheduler-name``: ``volcano`` when Volcano is installed, a scheduler-plugins
    scheduler name, or unset for no gang scheduling. The operator exits at start-up if the matching
    PodGroup CRD is missing."""


class ResourceFlavor(TypedDict):
    """A kind of node capacity (a Kueue ResourceFlavor)."""

    name: str
    """Flavor name (a DNS label)."""
    node_labels: NotRequired[Mapping[str, str]]
    """Labels that place admitted pods on this flavor's nodes; empty for any node. Default: ``{}``."""


class ClusterQueue(TypedDict):
    """A cluster-wide pool of quota (a Kueue ClusterQueue)."""

    name: str
    """Queue name (a DNS label)."""
    quotas: Mapping[str, Mapping[str, Any]]
    """Per flavor, the nominal quota of each resource, a Kubernetes quantity (a string, or a number),
    e.g. ``{"default": {"cpu": "8", "memory": "32Gi"}}``. Every flavor must quote the same resources:
    Kueue puts them in one resource group."""


class LocalQueue(TypedDict):
    """A namespace's door to a ClusterQueue (a Kueue LocalQueue); jobs name it as their ``queue``."""

    name: str
    """Queue name (a DNS label)."""
    namespace: str
    """Namespace the jobs run in."""
    cluster_queue: str
    """The ClusterQueue it feeds."""


class KueueArgsDict(TypedDict):
    """The arguments of the Kueue add-on."""

    flavors: NotRequired[Sequence[ResourceFlavor]]
    """ResourceFlavors. Default: ``[]``."""
    cluster_queues: NotRequired[Sequence[ClusterQueue]]
    """ClusterQueues; each may quote only the flavors above. Default: ``[]``."""
    local_queues: NotRequired[Sequence[LocalQueue]]
    """LocalQueues; each must feed one of the ClusterQueues above. Default: ``[]``."""
    namespace: NotRequired[str]
    """Namespace of the release. Default: ``"kueue-system"``."""
    frameworks: NotRequired[Sequence[str]]
    """The integrations Kueue manages (its ``integrations.frameworks``); unset, the chart's (``batch/job``,
    ``kubeflow.org/mpijob``, ``ray.io/rayjob``, ...). Add ``kubeflow.org/pytorchjob`` to queue PyTorchJobs
    (the stack does when it installs the training operator)."""
    pods_ready_timeout: NotRequired[int]
    """Seconds an admitted workload has for all its pods to become ready before Kueue evicts and requeues
    it (``waitForPodsReady.timeout``). Default: ``600``."""
    block_admission: NotRequired[bool]
    """Admit the next workload only once the previous one's pods are all ready
    (``waitForPodsReady.blockAdmission``), so two half-started jobs never hold each other's nodes.
    Default: ``true``."""
    requeue_limit: NotRequired[Optional[int]]
    """Evictions for pods that were not ready in time before Kueue deactivates the workload, saying so in
    its conditions (``requeuingStrategy.backoffLimitCount``); ``None`` (from Python) requeues forever.
    Default: ``3``."""
