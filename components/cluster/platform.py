"""What an EKS cluster installs around its jobs: the EKS Pod Identity agent (always: the cluster's own drivers and a
job's ``iam_role_arn`` bind their roles through it), the storage drivers asked for, the EFA device plugin when a
GPU group has EFA, and the Cluster Autoscaler when asked for."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import pulumi
import pulumi_aws as aws

from components.cluster.autoscaling import install_autoscaler, install_efa_plugin, scale_from_zero_tags
from components.cluster.identity import POD_IDENTITY_AGENT
from components.cluster.storage import StorageContext, install_storage
from components.errors import ArgumentError

if TYPE_CHECKING:
    from components.cluster.eks import EksGpuClusterArgs


@dataclass(frozen=True)
class PlatformContext:
    """The cluster's parts the platform add-ons need.

    Attributes:
        cluster_name: the EKS cluster's name; ``None`` when nothing needs it (no pod identity agent).
        vpc_id: its VPC.
        node_subnet_ids: its nodes' subnets.
        node_security_group_id: the EKS cluster security group (its managed nodes').
        parent: the cluster component.
        provider: its Kubernetes provider.
        node_groups: its node groups (controllers need nodes to run on).
        efa_groups: its EFA GPU groups: name (also the EKS node group's), instance types, resource.
    """

    cluster_name: Optional[pulumi.Input[str]]
    vpc_id: pulumi.Input[str]
    node_subnet_ids: Sequence[pulumi.Input[str]]
    node_security_group_id: pulumi.Input[str]
    parent: pulumi.Resource
    provider: pulumi.ProviderResource
    node_groups: Sequence[pulumi.Resource]
    efa_groups: Sequence[tuple[str, Sequence[str], pulumi.Resource]] = ()


@dataclass(frozen=True)
class Platform:
    """What :func:`install_platform` created, by part (empty where not asked for)."""

    pod_identity_agent: Optional[pulumi.Resource]
    storage: tuple[pulumi.Resource, ...]
    efa_device_plugin: tuple[pulumi.Resource, ...]
    autoscaler: tuple[pulumi.Resource, ...]


def autoscaler_region(args: EksGpuClusterArgs) -> str:
    """The region the autoscaler works in: ``args.region``, else the ``aws:region`` config.

    Raises:
        ArgumentError: neither is set.
    """
    region = args.region or pulumi.Config("aws").get("region")
    if not region:
        raise ArgumentError("region", None, "the cluster autoscaler needs the AWS region, and neither region nor the "
                            "aws:region config sets it", "set region, or aws:region in the stack config")
    return region


def install_platform(name: str, args: EksGpuClusterArgs, ctx: PlatformContext) -> Platform:
    """Install the platform add-ons ``args`` asks for on the cluster ``ctx`` describes.

    Raises:
        ArgumentError: the autoscaler is asked for without a region.
    """
    region = autoscaler_region(args) if args.autoscaler else None
    agent = None
    after = list(ctx.node_groups)
    if args.pod_identity_agent:
        if ctx.cluster_name is None:
            raise ArgumentError("cluster_name", None, "is unset, and the pod identity agent needs the cluster's name",
                                "give the platform the EKS cluster's name")
        agent = aws.eks.Addon(f"{name}-pod-identity-agent", cluster_name=ctx.cluster_name,
                              addon_name=POD_IDENTITY_AGENT,
                              opts=pulumi.ResourceOptions(parent=ctx.parent, depends_on=list(ctx.node_groups)))
        after.append(agent)
    storage = install_storage(name, args.storage, StorageContext(
        cluster_name=ctx.cluster_name or "", vpc_id=ctx.vpc_id, node_subnet_ids=ctx.node_subnet_ids,
        node_security_group_id=ctx.node_security_group_id, parent=ctx.parent, provider=ctx.provider,
        after=after)) if args.storage else []
    efa = (install_efa_plugin(name, ctx.parent, ctx.provider, ctx.node_groups),) if args.efa else ()
    scaler = (install_autoscaler(name, ctx.cluster_name or "", region, ctx.parent, ctx.provider, after,
                                 provisioning_requests=args.provisioning_requests) if region is not None else [])
    if region is not None:
        scaler += [tag for group, types, resource in ctx.efa_groups for tag in scale_from_zero_tags(
            name, group, types, ctx.cluster_name or "", resource, ctx.parent)]
    return Platform(agent, tuple(storage), efa, tuple(scaler))
