"""What the stack's cluster provides, derived from its config: the value its jobs are checked against."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Optional

from components.addons import KueueArgs
from components.capabilities import (
    NO_GANG,
    ClusterCapabilities,
    KueueCapabilities,
    KueueClusterQueue,
    KueueFlavor,
    NodeGroupCapabilities,
)
from components.cluster import ClusterArgs, EksGpuClusterArgs, ExistingClusterArgs, KindClusterArgs
from components.cluster.storage import EBS, OFFERS, RWO
from components.stack.addons import AddonsConfig


def kueue_capabilities(args: KueueArgs) -> KueueCapabilities:
    """Kueue as the add-on installs it: its integrations, ClusterQueues (flavors in order) and LocalQueues."""
    labels = {f.name: f.node_labels for f in args.flavors}
    queues = {
        q.name: KueueClusterQueue(q.name, tuple(
            KueueFlavor(flavor, labels.get(flavor, {}), {r: str(v) for r, v in quotas.items()})
            for flavor, quotas in q.quotas.items()
        ))
        for q in args.cluster_queues
    }
    return KueueCapabilities(
        frameworks=frozenset(args.frameworks),
        cluster_queues=queues,
        local_queues={(q.namespace, q.name): q.cluster_queue for q in args.local_queues},
    )


def cluster_capabilities(cluster: ClusterArgs, addons: AddonsConfig) -> ClusterCapabilities:
    """What a stack's cluster and add-ons provide.

    GPUs are advertised when the stack installs the device plugin; an existing cluster's GPU nodes
    (``existingGpuNodes``) are taken to advertise them already, and such a cluster may run the
    scheduler-plugins scheduler, which trainplane never installs.
    """
    existing = isinstance(cluster, ExistingClusterArgs)
    operator = addons.training_operator
    classes, default = storage_classes(cluster)
    return ClusterCapabilities(
        gpu_nodes=cluster.gpu_nodes,
        gpu_resources=cluster.gpu_nodes and (existing or addons.device_plugin is not None),
        training_operator=operator is not None,
        operator_gang_scheduler=operator.gang_scheduler if operator is not None else NO_GANG,
        volcano_queues=addons.volcano.queues if addons.volcano is not None else None,
        scheduler_plugins=existing,
        kueue=kueue_capabilities(addons.kueue) if addons.kueue is not None else None,
        node_groups={g.name: NodeGroupCapabilities(g.name, tuple(g.instance_types), g.efa)
                     for g in cluster.gpu_node_groups} if isinstance(cluster, EksGpuClusterArgs) else None,
        storage_classes=classes,
        default_storage_class=default,
        trainer_runtimes=tuple(addons.trainer.gang_schedulers) if addons.trainer is not None else None,
    )


KIND_STORAGE_CLASS = "standard"
"""kind's default StorageClass (sigs.k8s.io/kind ``pkg/cluster/internal/create/actions/installstorage/storage.go``:
the node image's ``/kind/manifests/default-storage.yaml``, rancher's local-path provisioner, or a host-path
class): node-local volumes, so ReadWriteOnce only."""


def storage_classes(cluster: ClusterArgs) -> tuple[Optional[Mapping[str, tuple[str, ...]]], Optional[str]]:
    """The StorageClasses a stack's cluster offers (with their access modes) and its default: EKS the ones its
    ``storage`` installs (``gp3`` the default), kind its ``standard``, an existing cluster those its config
    lists (``existingStorageClasses``; unknown when unset)."""
    if isinstance(cluster, KindClusterArgs):
        return {KIND_STORAGE_CLASS: RWO}, KIND_STORAGE_CLASS
    if isinstance(cluster, EksGpuClusterArgs):
        offers = [OFFERS[kind] for kind in cluster.storage]
        return {o.name: o.access_modes for o in offers}, OFFERS[EBS].name if EBS in cluster.storage else None
    if cluster.storage_classes is None:
        return None, None
    return {name: tuple(modes) for name, modes in cluster.storage_classes.items()}, cluster.default_storage_class
