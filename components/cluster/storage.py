"""Storage for an EKS cluster, on request: the EBS CSI driver with a default ``gp3`` StorageClass, the EFS CSI
driver with a file system and mount targets in the nodes' subnets, and the FSx for Lustre CSI driver; each
driver's controller runs with its own IAM role, bound by EKS Pod Identity (``components.cluster.identity``).

Sources, EKS User Guide (awsdocs/amazon-eks-user-guide ``latest/ug/storage/``): ``ebs-csi.adoc`` (add-on
``aws-ebs-csi-driver``, ServiceAccount ``ebs-csi-controller-sa``, policy ``AmazonEBSCSIDriverPolicy``),
``efs-csi.adoc`` (add-on ``aws-efs-csi-driver``, ``efs-csi-controller-sa``, ``AmazonEFSCSIDriverPolicy``; the file
system's security group admits NFS, TCP 2049, from the nodes), ``fsx-csi-create.adoc`` (the driver from
kubernetes-sigs/aws-fsx-csi-driver, ``fsx-csi-controller-sa``, ``AmazonFSxFullAccess``; its StorageClass names a
``subnetId``, ``securityGroupIds`` and a ``deploymentType``). FSx for Lustre's security group admits TCP 988 and
1018-1023 (FSx for Lustre User Guide, "Amazon VPC security groups").

Pod identity rather than IRSA: the EBS and EFS guides both say "AWS suggests using EKS Pod Identities" for the
driver's role; the FSx guide shows IRSA, but its driver (v1.9.0, chart 1.17.0)
reads credentials with the AWS SDK for Go v2 (``go.mod``: ``aws-sdk-go-v2/config`` v1.32.3), whose default chain
includes EKS Pod Identity, so one mechanism serves all three.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.addons.helm import helm_release
from components.addons.versions import AWS_FSX_CSI_DRIVER
from components.cluster.identity import pod_identity_role

EBS = "ebs"
EFS = "efs"
FSX = "fsx"
STORAGE_KINDS = (EBS, EFS, FSX)
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
MANAGED_POLICY = "arn:aws:iam::aws:policy/"


@dataclass(frozen=True)
class StorageClassOffer:
    """A StorageClass a cluster offers jobs.

    Attributes:
        name: the StorageClass name a claim gives as ``storageClassName``.
        access_modes: the access modes its volumes support.
    """

    name: str
    access_modes: tuple[str, ...]


RWO = ("ReadWriteOnce",)
RWX = ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany")
OFFERS = {
    EBS: StorageClassOffer("gp3", RWO),
    EFS: StorageClassOffer("efs", RWX),
    FSX: StorageClassOffer("fsx-lustre", RWX),
}
"""The StorageClass each kind of storage adds: EBS volumes attach to one node, EFS and Lustre mount everywhere."""


@dataclass(frozen=True)
class StorageContext:
    """What the storage resources need of the cluster.

    Attributes:
        cluster_name: the EKS cluster's name.
        vpc_id: its VPC.
        node_subnet_ids: the subnets of its nodes (one per zone: EFS allows one mount target per zone).
        node_security_group_id: the security group of its nodes (the EKS cluster security group).
        parent: the cluster component.
        provider: its Kubernetes provider.
        after: what the drivers wait for (the node groups, the pod identity agent).
    """

    cluster_name: pulumi.Input[str]
    vpc_id: pulumi.Input[str]
    node_subnet_ids: Sequence[pulumi.Input[str]]
    node_security_group_id: pulumi.Input[str]
    parent: pulumi.Resource
    provider: pulumi.ProviderResource
    after: Sequence[pulumi.Resource]


def storage_class(name: str, ctx: StorageContext, offer: StorageClassOffer, provisioner: str,
                  parameters: dict[str, Any], default: bool = False, binding: str = "WaitForFirstConsumer",
                  depends_on: Sequence[pulumi.Resource] = ()) -> k8s.storage.v1.StorageClass:
    """One StorageClass of ``offer``'s name."""
    metadata: dict[str, Any] = {"name": offer.name}
    if default:
        metadata["annotations"] = {DEFAULT_CLASS_ANNOTATION: "true"}
    return k8s.storage.v1.StorageClass(
        name, metadata=cast(Any, metadata), provisioner=provisioner, parameters=parameters, reclaim_policy="Delete",
        volume_binding_mode=binding, allow_volume_expansion=True,
        opts=pulumi.ResourceOptions(parent=ctx.parent, provider=ctx.provider, depends_on=list(depends_on)))


def eks_addon(name: str, ctx: StorageContext, addon: str, service_account: str, policy: str) -> aws.eks.Addon:
    """An EKS add-on whose controller ServiceAccount gets a role with ``policy`` by pod identity."""
    role, policies = pod_identity_role(f"{name}-role", ctx.parent, managed_policies=[MANAGED_POLICY + policy])
    return aws.eks.Addon(
        name, cluster_name=ctx.cluster_name, addon_name=addon,
        pod_identity_associations=[aws.eks.AddonPodIdentityAssociationArgs(
            role_arn=role.arn, service_account=service_account)],
        opts=pulumi.ResourceOptions(parent=ctx.parent, depends_on=[*ctx.after, *policies]))


def install_ebs(name: str, ctx: StorageContext) -> list[pulumi.Resource]:
    """The EBS CSI add-on and the default ``gp3`` StorageClass (encrypted; bound where the pod lands)."""
    addon = eks_addon(f"{name}-ebs-csi", ctx, "aws-ebs-csi-driver", "ebs-csi-controller-sa",
                      "service-role/AmazonEBSCSIDriverPolicy")
    cls = storage_class(f"{name}-gp3", ctx, OFFERS[EBS], "ebs.csi.aws.com", {"type": "gp3", "encrypted": "true"},
                        default=True, depends_on=[addon])
    return [addon, cls]


def _security_group(name: str, ctx: StorageContext, ports: Sequence[tuple[int, int]], what: str
                    ) -> aws.ec2.SecurityGroup:
    return aws.ec2.SecurityGroup(
        name, vpc_id=ctx.vpc_id, description=f"{what} from the cluster's nodes",
        ingress=[aws.ec2.SecurityGroupIngressArgs(protocol="tcp", from_port=low, to_port=high,
                                                  security_groups=[ctx.node_security_group_id], self=True)
                 for low, high in ports],
        egress=[aws.ec2.SecurityGroupEgressArgs(protocol="-1", from_port=0, to_port=0, cidr_blocks=["0.0.0.0/0"])],
        opts=pulumi.ResourceOptions(parent=ctx.parent))


def install_efs(name: str, ctx: StorageContext) -> list[pulumi.Resource]:
    """An encrypted EFS file system (elastic throughput) with a mount target in each node subnet, the EFS CSI
    add-on, and the ``efs`` StorageClass (an access point per claim, ``provisioningMode: efs-ap``)."""
    child = pulumi.ResourceOptions(parent=ctx.parent)
    group = _security_group(f"{name}-efs-sg", ctx, [(2049, 2049)], "NFS")
    fs = aws.efs.FileSystem(f"{name}-efs", encrypted=True, throughput_mode="elastic",
                            tags={"Name": f"{name}-efs"}, opts=child)
    targets = [aws.efs.MountTarget(f"{name}-efs-{i}", file_system_id=fs.id, subnet_id=subnet,
                                   security_groups=[group.id], opts=child)
               for i, subnet in enumerate(ctx.node_subnet_ids)]
    addon = eks_addon(f"{name}-efs-csi", ctx, "aws-efs-csi-driver", "efs-csi-controller-sa",
                      "service-role/AmazonEFSCSIDriverPolicy")
    cls = storage_class(f"{name}-efs-class", ctx, OFFERS[EFS], "efs.csi.aws.com",
                        {"provisioningMode": "efs-ap", "fileSystemId": fs.id, "directoryPerms": "700"},
                        binding="Immediate", depends_on=[addon, *targets])
    return [group, fs, *targets, addon, cls]


def install_fsx(name: str, ctx: StorageContext) -> list[pulumi.Resource]:
    """The FSx for Lustre CSI driver (Helm, pinned), its role, a security group for Lustre traffic and the
    ``fsx-lustre`` StorageClass: a ``SCRATCH_2`` file system per claim in the first node subnet."""
    group = _security_group(f"{name}-fsx-sg", ctx, [(988, 988), (1018, 1023)], "Lustre")
    role, policies = pod_identity_role(f"{name}-fsx-csi-role", ctx.parent,
                                       managed_policies=[MANAGED_POLICY + "AmazonFSxFullAccess"])
    association = aws.eks.PodIdentityAssociation(
        f"{name}-fsx-csi", cluster_name=ctx.cluster_name, namespace="kube-system",
        service_account="fsx-csi-controller-sa", role_arn=role.arn,
        opts=pulumi.ResourceOptions(parent=ctx.parent, depends_on=[*ctx.after, *policies]))
    release = helm_release(f"{name}-fsx-csi-driver", AWS_FSX_CSI_DRIVER, release_name="aws-fsx-csi-driver",
                           namespace="kube-system", parent=ctx.parent, values=fsx_values(),
                           provider=ctx.provider, depends_on=[association])
    cls = storage_class(f"{name}-fsx-class", ctx, OFFERS[FSX], "fsx.csi.aws.com",
                        {"subnetId": ctx.node_subnet_ids[0], "securityGroupIds": group.id,
                         "deploymentType": "SCRATCH_2"}, binding="Immediate", depends_on=[release])
    return [group, association, release, cls]


def fsx_values() -> dict[str, Any]:
    """The FSx CSI chart's values: its controller's ServiceAccount under the name the association binds
    (``controller.serviceAccount``, kubernetes-sigs/aws-fsx-csi-driver helm-chart-aws-fsx-csi-driver-1.17.0
    ``charts/aws-fsx-csi-driver/values.yaml``); its node DaemonSet already tolerates every taint
    (``node.tolerateAllTaints: true``), so it reaches the tainted GPU nodes."""
    return {"controller": {"serviceAccount": {"create": True, "name": "fsx-csi-controller-sa"}},
            "node": {"tolerateAllTaints": True}}


INSTALLERS = {EBS: install_ebs, EFS: install_efs, FSX: install_fsx}


def install_storage(name: str, kinds: Sequence[str], ctx: StorageContext) -> list[pulumi.Resource]:
    """Install each kind of storage in ``kinds`` (``ebs``, ``efs``, ``fsx``); returns every resource made."""
    return [r for kind in kinds for r in INSTALLERS[kind](name, ctx)]
