"""Build a stack from its validated config: cluster, then add-ons, then jobs."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from components.addons import Kueue, NvidiaDevicePlugin, TrainerV2, TrainingOperator, Volcano
from components.cluster import (
    Cluster,
    ClusterArgs,
    EksGpuCluster,
    EksGpuClusterArgs,
    ExistingCluster,
    ExistingClusterArgs,
    KindCluster,
)
from components.job import DistributedJob
from components.stack.addons import AddonsConfig
from components.stack.config import StackConfig


@dataclass(frozen=True)
class StackOutputs:
    """What the stack exports.

    Attributes:
        kubeconfig: The cluster's kubeconfig (secret).
        coordinator_urls: Per job name, the coordinator agent's in-cluster URL.
        tokens: Per job name, the job token clients send as a bearer token (secrets).
    """

    kubeconfig: pulumi.Output[str]
    coordinator_urls: dict[str, pulumi.Output[str]]
    tokens: dict[str, pulumi.Output[str]]


def create_cluster(name: str, args: ClusterArgs) -> Cluster:
    """Create the cluster component that matches ``args``."""
    if isinstance(args, EksGpuClusterArgs):
        return EksGpuCluster(f"{name}-cluster", args)
    if isinstance(args, ExistingClusterArgs):
        return ExistingCluster(f"{name}-cluster", args)
    return KindCluster(f"{name}-cluster", args)


def create_addons(name: str, config: AddonsConfig, cluster: Cluster) -> list[pulumi.ComponentResource]:
    """Create the selected add-ons on ``cluster``, in an order where every CRD exists before its users.

    Volcano comes before the training operator (which checks for the PodGroup CRD at start-up when
    gang scheduling is on), and the training operator before Kueue (whose PyTorchJob integration
    needs that CRD).

    Returns:
        The add-on components, in creation order.
    """
    addons: list[pulumi.ComponentResource] = []

    def opts() -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(provider=cluster.provider, depends_on=[cluster, *addons])

    if config.device_plugin:
        addons.append(NvidiaDevicePlugin(f"{name}-device-plugin", config.device_plugin, opts()))
    if config.volcano:
        addons.append(Volcano(f"{name}-volcano", config.volcano, opts()))
    if config.training_operator:
        addons.append(TrainingOperator(f"{name}-training-operator", config.training_operator, opts()))
    if config.kueue:
        addons.append(Kueue(f"{name}-kueue", config.kueue, opts()))
    if config.trainer:  # after Volcano: the Trainer watches PodGroups only if their CRD exists when it starts
        addons.append(TrainerV2(f"{name}-trainer", config.trainer, opts()))
    return addons


def build_stack(config: StackConfig, name: str = "trainplane") -> StackOutputs:
    """Create the cluster, its add-ons and the jobs.

    Jobs depend on every add-on: the add-ons install the CRDs the jobs' custom resources use and
    the admission webhooks their pods pass through. Each job is checked against what the cluster
    provides (``config.capabilities``).

    Args:
        config: The validated stack config.
        name: Prefix of the cluster and add-on resource names; jobs keep their own names.

    Returns:
        The stack's outputs.
    """
    cluster = create_cluster(name, config.cluster)
    addons = create_addons(name, config.addons, cluster)
    jobs = {
        job.name: DistributedJob(
            job.name,
            job.args,
            opts=pulumi.ResourceOptions(provider=cluster.provider, depends_on=[cluster, *addons]),
            crd_dependencies=addons,
            cluster=config.capabilities,
        )
        for job in config.jobs
    }
    return StackOutputs(
        kubeconfig=cluster.kubeconfig,
        coordinator_urls={job_name: job.coordinator_url for job_name, job in jobs.items()},
        tokens={job_name: job.token for job_name, job in jobs.items()},
    )
