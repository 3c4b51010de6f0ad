"""Cluster components: each exposes ``provider`` (Kubernetes), ``kubeconfig`` (secret) and ``gpu_nodes``."""

from typing import Union

from components.cluster.eks import EksGpuCluster, EksGpuClusterArgs, GpuNodeGroupArgs
from components.cluster.existing import ExistingCluster, ExistingClusterArgs
from components.cluster.kind import KindCluster, KindClusterArgs

ClusterArgs = Union[EksGpuClusterArgs, KindClusterArgs, ExistingClusterArgs]
Cluster = Union[EksGpuCluster, KindCluster, ExistingCluster]

__all__ = [
    "Cluster",
    "ClusterArgs",
    "EksGpuCluster",
    "EksGpuClusterArgs",
    "ExistingCluster",
    "ExistingClusterArgs",
    "GpuNodeGroupArgs",
    "KindCluster",
    "KindClusterArgs",
]
