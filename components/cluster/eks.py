"""``EksGpuCluster``: an EKS cluster with a CPU system node group and GPU managed node groups."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks
import pulumi_kubernetes as k8s

from components import validate
from components.cluster.platform import Platform, PlatformContext, install_platform
from components.cluster.storage import STORAGE_KINDS
from components.cluster.vpc import Network, create_public_network, subnet_cidrs
from components.errors import ArgumentError
from components.job.fabric import NODE_GROUP_LABEL
from runtime.agent import contract
from runtime.agent.spec import setting

GPU_AMI_TYPE = "AL2023_x86_64_NVIDIA"
"""EKS-optimized Amazon Linux 2023 with the NVIDIA driver and container toolkit preinstalled; it ships
without the NVIDIA device plugin, which the ``device-plugin`` add-on installs (EKS User Guide, "Install
Kubernetes device plugin for GPUs": awsdocs/amazon-eks-user-guide ``latest/ug/ml/ml-eks-k8s-device-plugin.adoc``)."""
SYSTEM_AMI_TYPE = "AL2023_x86_64_STANDARD"
"""The CPU system node group's AMI, named rather than left to the EKS API's default for the version."""
VPC_CNI_OPTIONS: dict[str, Any] = {"enable_network_policy": True}
"""The VPC CNI add-on enforces NetworkPolicy only with its network policy agent on, which is off unless
``enableNetworkPolicy`` is set in its configuration; pulumi-eks passes the option there (pulumi/pulumi-eks
v4.3.0 ``nodejs/eks/addons/cni-addon.ts``, ``mergeConfigurationValues``). Without it each job's
NetworkPolicy would be accepted and ignored."""
CAPACITY_TYPES = ("ON_DEMAND", "SPOT")
NODE_POLICY_ARNS = {
    "worker": "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    "cni": "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
    "ecr": "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
}
"""The AWS managed policies every EKS node role needs (EKS User Guide, "Amazon EKS node IAM role")."""
MIN_ZONES = 2
"""EKS requires subnets in at least two availability zones."""


@dataclass(frozen=True)
class GpuNodeGroupArgs:
    """One GPU managed node group.

    Attributes:
        name: Group name (a DNS label), unique in the cluster.
        instance_types: EC2 GPU instance types, e.g. ``("g5.12xlarge",)``.
        min_size: Fewest nodes.
        max_size: Most nodes (at least 1).
        desired_size: Nodes at creation, between ``min_size`` and ``max_size``.
        disk_size_gib: Root volume per node, GiB (GPU images are large).
        efa: Attach Elastic Fabric Adapters and put the nodes in a cluster placement group.
        availability_zone: Zone of the placement group; required with ``efa``.
        capacity_type: ``ON_DEMAND`` or ``SPOT``.

    Raises:
        ArgumentError: A field is invalid; the message names it, the value and the fix.
    """

    name: str
    instance_types: Sequence[str]
    min_size: int = 0
    max_size: int = 1
    desired_size: int = 1
    disk_size_gib: int = 200
    efa: bool = False
    availability_zone: Optional[str] = None
    capacity_type: str = "ON_DEMAND"

    def __post_init__(self) -> None:
        validate.dns_label("name", self.name)
        object.__setattr__(
            self, "instance_types", validate.strings("instance_types", self.instance_types, non_empty=True)
        )
        validate.integer("min_size", self.min_size)
        validate.integer("max_size", self.max_size, minimum=1)
        validate.integer("desired_size", self.desired_size)
        validate.integer("disk_size_gib", self.disk_size_gib, minimum=20)
        validate.one_of("capacity_type", self.capacity_type, CAPACITY_TYPES)
        sizes = f"use min_size ({self.min_size}) <= desired_size <= max_size ({self.max_size})"
        validate.require("max_size", self.max_size, setting.whole(self.min_size, sizes))
        validate.require("desired_size", self.desired_size, setting.whole(self.min_size, sizes, self.max_size))
        if self.efa and not self.availability_zone:
            raise ArgumentError.of("availability_zone", self.availability_zone,
                                   "is required with efa (its cluster placement group is in one zone)",
                                   "name the placement group's zone")


@dataclass(frozen=True)
class EksGpuClusterArgs:
    """Settings of an EKS GPU cluster.

    Give ``vpc_id`` with its subnets to use an existing VPC, or ``availability_zones`` (two or
    more) to create a public VPC from ``vpc_cidr``.

    Attributes:
        gpu_node_groups: GPU managed node groups; may be empty for a CPU-only cluster.
        version: Kubernetes minor version, e.g. ``"1.34"``; ``None`` takes EKS's default.
        vpc_id: Existing VPC.
        public_subnet_ids: Existing public subnets.
        private_subnet_ids: Existing private subnets; nodes go there when given.
        availability_zones: Zones of the created VPC's subnets.
        vpc_cidr: IPv4 block of the created VPC.
        system_instance_type: EC2 type of the CPU system node group (add-on controllers).
        system_nodes: Nodes in the system group (at least 1).
        storage: CSI drivers to install, from ``ebs`` (default ``gp3`` StorageClass), ``efs`` (a file system,
            mount targets and the ``efs`` class) and ``fsx`` (the ``fsx-lustre`` class), each with its IAM
            role (``components.cluster.storage``).
        autoscaler: Install the Cluster Autoscaler, which then owns the GPU groups' desired sizes
            (``components.cluster.autoscaling``).
        provisioning_requests: The autoscaler also handles ProvisioningRequests (``--enable-provisioning-requests``,
            with their CRD), for the Kueue add-on's ``atomic_scale_up``; needs ``autoscaler``.
        cluster_name: The EKS cluster's name; ``None`` lets Pulumi name it.
        region: The AWS region, for the autoscaler; ``None`` reads ``aws:region``.
        pod_identity: Install the EKS Pod Identity agent, for jobs' ``iam_role_arn`` (storage and the
            autoscaler install it too).

    Raises:
        ArgumentError: A field is invalid or the network settings are inconsistent.
    """

    gpu_node_groups: Sequence[GpuNodeGroupArgs] = ()
    version: Optional[str] = None
    vpc_id: Optional[str] = None
    public_subnet_ids: Sequence[str] = ()
    private_subnet_ids: Sequence[str] = ()
    availability_zones: Sequence[str] = ()
    vpc_cidr: str = "10.0.0.0/16"
    system_instance_type: str = "m6i.large"
    system_nodes: int = 2
    storage: Sequence[str] = ()
    autoscaler: bool = False
    provisioning_requests: bool = False
    cluster_name: Optional[str] = None
    region: Optional[str] = None
    pod_identity: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpu_node_groups", tuple(self.gpu_node_groups))
        object.__setattr__(self, "storage", validate.strings("storage", self.storage))
        for kind in self.storage:
            validate.one_of("storage", kind, STORAGE_KINDS)
        for flag in ("autoscaler", "provisioning_requests", "pod_identity"):
            validate.boolean(flag, getattr(self, flag))
        if self.provisioning_requests and not self.autoscaler:
            raise ArgumentError.of("provisioning_requests", True,
                                   "ProvisioningRequests are the Cluster Autoscaler's, and autoscaler is off",
                                   "set autoscaler too, or leave provisioning_requests off")
        if self.cluster_name is not None:
            validate.text("cluster_name", self.cluster_name)
        for field in ("public_subnet_ids", "private_subnet_ids", "availability_zones"):
            object.__setattr__(self, field, validate.strings(field, getattr(self, field)))
        validate.integer("system_nodes", self.system_nodes, minimum=1)
        validate.text("system_instance_type", self.system_instance_type)
        for group in self.gpu_node_groups:
            if not isinstance(group, GpuNodeGroupArgs):
                raise ArgumentError.of("gpu_node_groups", group, "must be GpuNodeGroupArgs",
                                       "give GpuNodeGroupArgs instances")
        validate.require("gpu_node_groups", [group.name for group in self.gpu_node_groups], validate.NAMED_ONCE)
        if self.vpc_id:
            self._check_existing_network()
        else:
            self._check_created_network()

    def _check_existing_network(self) -> None:
        if len(self.public_subnet_ids) + len(self.private_subnet_ids) < MIN_ZONES:
            raise ArgumentError.of(
                "public_subnet_ids",
                self.public_subnet_ids,
                f"with private_subnet_ids, names fewer than {MIN_ZONES} subnets",
                f"list at least {MIN_ZONES} subnets of {self.vpc_id} (public or private) in different zones",
            )

    def _check_created_network(self) -> None:
        if self.public_subnet_ids or self.private_subnet_ids:
            raise ArgumentError.of("vpc_id", self.vpc_id, "is unset, and subnet ids are given",
                                   "set vpc_id too when giving subnet ids")
        if len(self.availability_zones) < MIN_ZONES:
            raise ArgumentError.of(
                "availability_zones",
                self.availability_zones,
                f"names fewer than {MIN_ZONES} zones",
                f"list {MIN_ZONES} or more zones for the created VPC, or give vpc_id and subnets",
            )
        subnet_cidrs(self.vpc_cidr, len(self.availability_zones))
        for i, group in enumerate(self.gpu_node_groups):
            if group.efa and group.availability_zone not in self.availability_zones:
                raise ArgumentError.of(
                    f"gpu_node_groups[{i}].availability_zone",
                    group.availability_zone,
                    "is none of the created VPC's zones, so the group's EFA placement group has no subnet",
                    f"pick one of availability_zones {list(self.availability_zones)} for group {group.name}",
                )

    @property
    def platform(self) -> bool:
        """Whether the cluster installs platform add-ons (``components.cluster.platform``): storage, the
        autoscaler, EFA's device plugin or the pod identity agent for jobs' IAM roles."""
        return bool(self.storage) or self.autoscaler or self.efa or self.pod_identity

    @property
    def pod_identity_agent(self) -> bool:
        """Whether the EKS Pod Identity agent is installed: for storage, the autoscaler or ``pod_identity``."""
        return bool(self.storage) or self.autoscaler or self.pod_identity

    @property
    def efa(self) -> bool:
        """Whether any GPU node group has EFA (then the EFA device plugin is installed)."""
        return any(group.efa for group in self.gpu_node_groups)

    @property
    def gpu_nodes(self) -> bool:
        """Whether the cluster has at least one GPU node group that can hold nodes."""
        return bool(self.gpu_node_groups)


def gpu_node_group_settings(group: GpuNodeGroupArgs) -> dict[str, Any]:
    """The ``eks.ManagedNodeGroup`` arguments that make ``group`` a GPU pool.

    Nodes run the NVIDIA AL2023 AMI, carry ``nvidia.com/gpu=true:NoSchedule`` so that only pods
    tolerating it land there, the ``nvidia.com/gpu.present=true`` label the device plugin
    chart selects on, and ``trainplane.dev/node-group=<name>``, which a job's ``node_group`` selects.
    The group's desired size is left to the cluster autoscaler after creation:
    ``ignore_scaling_changes`` makes pulumi-eks ignore ``scalingConfig.desiredSize`` on later updates
    (pulumi/pulumi-eks v4.3.0 ``nodejs/eks/nodes/nodegroup.ts``), so the next ``pulumi up`` does not reset
    a size the autoscaler chose; ``min_size`` and ``max_size`` still apply.
    """
    efa = (
        {"enable_efa_support": True, "placement_group_availability_zone": group.availability_zone}
        if group.efa
        else {}
    )
    return {
        "ami_type": GPU_AMI_TYPE,
        "instance_types": list(group.instance_types),
        "capacity_type": group.capacity_type,
        "disk_size": group.disk_size_gib,
        "labels": {contract.GPU_NODE_LABEL: "true", NODE_GROUP_LABEL: group.name},
        "taints": [
            aws.eks.NodeGroupTaintArgs(
                key=contract.GPU_TAINT_KEY, value=contract.GPU_TAINT_VALUE, effect="NO_SCHEDULE"
            )
        ],
        "scaling_config": aws.eks.NodeGroupScalingConfigArgs(
            min_size=group.min_size, max_size=group.max_size, desired_size=group.desired_size
        ),
        "ignore_scaling_changes": True,
        **efa,
    }


class EksGpuCluster(pulumi.ComponentResource):
    """EKS with API authentication, an OIDC provider, no default node group, a CPU system node
    group and GPU managed node groups.

    Attributes:
        provider: Kubernetes provider for the cluster.
        kubeconfig: The cluster's kubeconfig JSON (secret); it calls ``aws eks get-token``.
        gpu_nodes: Whether any GPU node group exists.
        cluster: The underlying ``eks.Cluster``.
        cluster_name: The EKS cluster's name (a job's ``eks_cluster_name``) when the pod identity agent is
            installed (``args.pod_identity_agent``), else None.
        platform: What ``install_platform`` added (pod identity agent, storage, EFA plugin, autoscaler), or None.
    """

    def __init__(
        self, name: str, args: EksGpuClusterArgs, opts: Optional[pulumi.ResourceOptions] = None
    ) -> None:
        super().__init__("trainplane:cluster:EksGpuCluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.gpu_nodes = args.gpu_nodes
        network = self._network(name, args)
        role, policies = self._node_role(name)
        self.cluster = eks.Cluster(
            f"{name}-eks",
            vpc_id=network.vpc_id,
            public_subnet_ids=list(network.public_subnet_ids) or None,
            private_subnet_ids=list(network.private_subnet_ids) or None,
            version=args.version,
            name=args.cluster_name,
            authentication_mode=eks.AuthenticationMode.API,
            create_oidc_provider=True,
            skip_default_node_group=True,
            access_entries={
                "nodes": eks.AccessEntryArgs(principal_arn=role.arn, type=eks.AccessEntryType.EC2_LINUX)
            },
            vpc_cni_options=eks.VpcCniOptionsArgs(**VPC_CNI_OPTIONS),
            opts=child,
        )
        node_subnets = list(network.private_subnet_ids) or None
        nodes = pulumi.ResourceOptions(parent=self, depends_on=policies)
        system = eks.ManagedNodeGroup(
            f"{name}-system",
            cluster=self.cluster,
            node_role=role,
            subnet_ids=node_subnets,
            ami_type=SYSTEM_AMI_TYPE,
            instance_types=[args.system_instance_type],
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(
                min_size=args.system_nodes, max_size=args.system_nodes, desired_size=args.system_nodes
            ),
            opts=nodes,
        )
        groups: list[pulumi.Resource] = [system]
        efa_groups: list[tuple[str, Sequence[str], pulumi.Resource]] = []
        for group in args.gpu_node_groups:
            named: dict[str, Any] = {"node_group_name": group.name} if args.autoscaler and group.efa else {}
            groups.append(eks.ManagedNodeGroup(
                f"{name}-gpu-{group.name}",
                cluster=self.cluster,
                node_role=role,
                subnet_ids=node_subnets,
                opts=nodes,
                **gpu_node_group_settings(group),
                **named,
            ))
            if named:
                efa_groups.append((group.name, tuple(group.instance_types), groups[-1]))
        self.kubeconfig: pulumi.Output[str] = pulumi.Output.secret(self.cluster.kubeconfig_json)
        self.provider = k8s.Provider(f"{name}-provider", kubeconfig=self.kubeconfig, opts=child)
        outputs: dict[str, Any] = {"kubeconfig": self.kubeconfig}
        self.cluster_name: Optional[pulumi.Output[str]] = None
        self.platform: Optional[Platform] = None
        if args.platform:
            if args.pod_identity_agent:
                self.cluster_name = (pulumi.Output.from_input(args.cluster_name) if args.cluster_name
                                     else self.cluster.eks_cluster.apply(lambda c: c.name))
                outputs["cluster_name"] = self.cluster_name
            self.platform = install_platform(name, args, PlatformContext(
                cluster_name=self.cluster_name, vpc_id=network.vpc_id,
                node_subnet_ids=list(network.private_subnet_ids or network.public_subnet_ids),
                node_security_group_id=self.cluster.cluster_security_group_id, parent=self, provider=self.provider,
                node_groups=groups, efa_groups=efa_groups))
        self.register_outputs(outputs)

    def _network(self, name: str, args: EksGpuClusterArgs) -> Network:
        if args.vpc_id:
            return Network(args.vpc_id, args.public_subnet_ids, args.private_subnet_ids)
        return create_public_network(name, args.vpc_cidr, args.availability_zones, parent=self)

    def _node_role(self, name: str) -> tuple[aws.iam.Role, list[aws.iam.RolePolicyAttachment]]:
        role = aws.iam.Role(
            f"{name}-node-role",
            assume_role_policy=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": "ec2.amazonaws.com"},
                            "Action": "sts:AssumeRole",
                        }
                    ],
                }
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        policies = [
            aws.iam.RolePolicyAttachment(
                f"{name}-node-{short}",
                role=role.name,
                policy_arn=arn,
                opts=pulumi.ResourceOptions(parent=self),
            )
            for short, arn in NODE_POLICY_ARNS.items()
        ]
        return role, policies
