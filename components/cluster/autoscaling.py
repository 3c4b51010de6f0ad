"""Node autoscaling and EFA devices for an EKS cluster: the Kubernetes Cluster Autoscaler and the EFA device plugin.

Why the Cluster Autoscaler and not Karpenter: trainplane's GPU capacity is EKS managed node groups (EFA support
and a cluster placement group per group, the taint and labels jobs select), and the Cluster Autoscaler scales
exactly those groups through their Auto Scaling groups, within each group's ``min_size``/``max_size``: one
model of capacity, declared in the stack. Karpenter would provision its own nodes from NodePools beside (or
instead of) the groups. The Cluster Autoscaler also has an all-or-nothing scale-up API for gangs
(ProvisioningRequest, ``best-effort-atomic-scale-up``, which Kueue's admission checks drive; FAQ "How can I use
ProvisioningRequest to run batch workloads"; best effort on AWS, ``components.addons.provisioning``), which
Karpenter lacks.

How it scales (kubernetes/autoscaler tag cluster-autoscaler-chart-9.59.0, ``cluster-autoscaler/FAQ.md`` and
``cluster-autoscaler/cloudprovider/aws/README.md``):

- Discovery: the ASGs of EKS managed node groups carry ``k8s.io/cluster-autoscaler/enabled`` and
  ``k8s.io/cluster-autoscaler/<cluster>``, which the chart's ``autoDiscovery.tags`` match by default.
- From zero: for a managed node group at 0 nodes it reads the group's labels and taints from
  ``eks:DescribeNodegroup`` (in :data:`AUTOSCALER_POLICY`) and the GPUs from the instance type, so a pending pod
  that tolerates the GPU taint and selects the group's labels scales it up; an EFA group's ASG is tagged with
  the EFA devices and huge pages its nodes add (:func:`scale_from_zero_tags`).
- Whole gangs: every scan (10 s) it takes the pods whose ``PodScheduled`` condition is ``False`` with reason
  ``Unschedulable`` together and adds the nodes they need in one scale-up, so a gang whose pods are all pending
  gets its nodes at once (Kueue ungates a workload's pods together when it admits it; Volcano's scheduler cache
  sets that condition on each pod of a gang it cannot place, ``taskUnschedulable``). This is not all-or-nothing:
  when a group's ``max_size`` or EC2 capacity stops short, the nodes that came up stay idle until scale-down.
- Whole gangs, atomically (opt-in, ``provisioning_requests``, for Kueue's ``atomic_scale_up``): the autoscaler
  runs with ``--enable-provisioning-requests`` (``config/flags/flags.go``; FAQ "Enabling ProvisioningRequest
  Support") and handles the ProvisioningRequests Kueue's admission check makes, one scale-up for all of a
  request's pods or none (``components.addons.provisioning`` says how far that goes on AWS). The chart's
  ClusterRole already grants ``provisioningrequests`` and ``provisioningrequests/status`` (get, list, watch,
  update, patch) and ``podtemplates`` (``templates/clusterrole.yaml``, with the default ``rbac.create`` and
  ``rbac.clusterScoped``), so no ``rbac.additionalRules``; the chart does not install the ProvisioningRequest
  CRD (no ``crds/``), which :data:`PROVISIONING_REQUEST_CRD` is, applied before the release.
- Idle: a node unneeded for ``scale-down-unneeded-time`` (10 min) is removed; a rank's pod is never evicted
  to consolidate (``components.job.platform.SAFE_TO_EVICT``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.addons.helm import helm_release
from components.addons.versions import AWS_EFA_DEVICE_PLUGIN, CLUSTER_AUTOSCALER
from components.cluster.identity import pod_identity_role
from components.gpu import gpu_toleration
from components.job.fabric import EFA_INTERFACES, EFA_NODE_HUGEPAGES, EFA_RESOURCE, HUGEPAGES_RESOURCE

AUTOSCALER_NAMESPACE = "kube-system"
AUTOSCALER_SERVICE_ACCOUNT = "cluster-autoscaler"
AUTOSCALER_POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Resource": ["*"], "Action": [
            "autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeAutoScalingInstances",
            "autoscaling:DescribeLaunchConfigurations", "autoscaling:DescribeScalingActivities",
            "ec2:DescribeImages", "ec2:DescribeInstanceTypes", "ec2:DescribeLaunchTemplateVersions",
            "ec2:GetInstanceTypesFromInstanceRequirements", "eks:DescribeNodegroup"]},
        {"Effect": "Allow", "Resource": ["*"], "Action": [
            "autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"]},
    ],
}
"""The permissions the Cluster Autoscaler's AWS README lists for auto-discovery ("IAM Policy", the full-featured
policy), ``eks:DescribeNodegroup`` included for scaling managed node groups from zero."""
SCALE_DOWN_UNNEEDED = "10m"
"""How long a node stays unneeded before the autoscaler removes it (the flag's default, stated)."""
AUTOSCALER_ARGS: dict[str, Any] = {
    "expander": "least-waste",
    "balance-similar-node-groups": True,
    "scale-down-unneeded-time": SCALE_DOWN_UNNEEDED,
    "scale-down-delay-after-add": "10m",
    "max-node-provision-time": "15m0s",
}
"""Flags for the chart's ``extraArgs`` (each a flag of the FAQ's "What are the parameters to CA?" table):
``least-waste`` picks the GPU group that leaves the least idle, similar groups are balanced across zones."""
PROVISIONING_REQUESTS_FLAG = "enable-provisioning-requests"
"""The autoscaler's flag (default false) for handling ProvisioningRequests (in the FAQ's parameter table)."""
PROVISIONING_REQUEST_CRD = (
    "https://raw.githubusercontent.com/kubernetes/autoscaler/cluster-autoscaler-chart-9.59.0/"
    "cluster-autoscaler/apis/config/crd/autoscaling.x-k8s.io_provisioningrequests.yaml")
"""The ProvisioningRequest CRD (``autoscaling.x-k8s.io``, ``v1`` served and stored, ``v1beta1`` served) at the
chart's tag, the file the FAQ says to deploy."""
EFA_PLUGIN_NAMESPACE = "kube-system"


def autoscaler_values(cluster_name: pulumi.Input[str], region: str,
                      provisioning_requests: bool = False) -> dict[str, Any]:
    """The Cluster Autoscaler chart's values: AWS auto-discovery of the cluster's node groups in ``region``, the
    ServiceAccount the pod identity association binds, and :data:`AUTOSCALER_ARGS`, with
    :data:`PROVISIONING_REQUESTS_FLAG` when ``provisioning_requests``. Every key is one of the chart's
    (``cluster-autoscaler/charts/cluster-autoscaler/values.yaml`` at cluster-autoscaler-chart-9.59.0; ``extraArgs``
    render as ``--<key>=<value>``, ``templates/deployment.yaml``)."""
    flags = {**AUTOSCALER_ARGS, PROVISIONING_REQUESTS_FLAG: True} if provisioning_requests else dict(AUTOSCALER_ARGS)
    return {
        "cloudProvider": "aws",
        "awsRegion": region,
        "autoDiscovery": {"clusterName": cluster_name},
        "rbac": {"serviceAccount": {"create": True, "name": AUTOSCALER_SERVICE_ACCOUNT}},
        "extraArgs": flags,
        "priorityClassName": "system-cluster-critical",
    }


def install_autoscaler(name: str, cluster_name: pulumi.Input[str], region: str, parent: pulumi.Resource,
                       provider: pulumi.ProviderResource, after: Sequence[pulumi.Resource], *,
                       provisioning_requests: bool = False) -> list[pulumi.Resource]:
    """The autoscaler's role (pod identity), its association, with ``provisioning_requests`` the
    ProvisioningRequest CRD, and the pinned chart; returns them."""
    role, policies = pod_identity_role(f"{name}-autoscaler-role", parent, inline_policy=AUTOSCALER_POLICY)
    association = aws.eks.PodIdentityAssociation(
        f"{name}-autoscaler", cluster_name=cluster_name, namespace=AUTOSCALER_NAMESPACE,
        service_account=AUTOSCALER_SERVICE_ACCOUNT, role_arn=role.arn,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[*after, *policies]))
    crds: list[pulumi.Resource] = [k8s.yaml.v2.ConfigFile(
        f"{name}-provisioning-request-crd", file=PROVISIONING_REQUEST_CRD,
        opts=pulumi.ResourceOptions(parent=parent, provider=provider, depends_on=list(after)))
    ] if provisioning_requests else []
    release = helm_release(f"{name}-cluster-autoscaler", CLUSTER_AUTOSCALER, release_name="cluster-autoscaler",
                           namespace=AUTOSCALER_NAMESPACE, parent=parent,
                           values=autoscaler_values(cluster_name, region, provisioning_requests), provider=provider,
                           depends_on=[association, *crds])
    return [role, association, *crds, release]


TEMPLATE_RESOURCE_TAG = "k8s.io/cluster-autoscaler/node-template/resources/"
"""The ASG tag prefix that tells the autoscaler what a node of a group at zero provides beyond what its instance
type says ("From version 1.14, Cluster Autoscaler can also determine the resources provided by each Auto
Scaling Group via tags", ``cloudprovider/aws/README.md``): an EFA pod's ``vpc.amazonaws.com/efa`` and
``hugepages-2Mi``, which an instance type does not tell."""


def template_resources(instance_types: Sequence[str]) -> dict[str, str]:
    """The resources an EFA group's node template adds (empty when its EFA count is not known)."""
    counts = {EFA_INTERFACES[t] for t in instance_types if t in EFA_INTERFACES}
    if len(counts) != 1:
        return {}
    return {EFA_RESOURCE: str(counts.pop()), HUGEPAGES_RESOURCE: EFA_NODE_HUGEPAGES}


def scale_from_zero_tags(name: str, group_name: str, instance_types: Sequence[str], cluster_name: pulumi.Input[str],
                         node_group: pulumi.Resource, parent: pulumi.Resource) -> list[pulumi.Resource]:
    """Tag an EFA group's Auto Scaling group with :func:`template_resources`, so that the autoscaler scales it
    from zero for pods that request EFA. EKS does not pass a managed node group's tags on to its ASG; the ASG is
    found from the node group (named ``group_name``) once it exists."""
    resources = template_resources(instance_types)
    if not resources:
        return []
    found = aws.eks.get_node_group_output(cluster_name=cluster_name, node_group_name=group_name,
                                          opts=pulumi.InvokeOutputOptions(depends_on=[node_group]))
    asg = found.apply(lambda g: g.resources[0].autoscaling_groups[0].name)
    return [aws.autoscaling.Tag(
        f"{name}-{group_name}-template-{i}", autoscaling_group_name=asg,
        tag=aws.autoscaling.TagTagArgs(key=TEMPLATE_RESOURCE_TAG + resource, value=amount, propagate_at_launch=False),
        opts=pulumi.ResourceOptions(parent=parent)) for i, (resource, amount) in enumerate(resources.items())]


def efa_plugin_values() -> dict[str, Any]:
    """The EFA device plugin chart's values: tolerate the GPU taint. Its DaemonSet already selects EFA-capable
    instance types (``supportedInstanceLabels``) and tolerates ``CriticalAddonsOnly`` before the ``tolerations``
    value (aws/eks-charts chart v0.5.30, ``stable/aws-efa-k8s-device-plugin/values.yaml`` and
    ``templates/daemonset.yaml``)."""
    return {"tolerations": [gpu_toleration()]}


def install_efa_plugin(name: str, parent: pulumi.Resource, provider: pulumi.ProviderResource,
                       after: Sequence[pulumi.Resource]) -> pulumi.Resource:
    """The EFA device plugin (pinned chart); it does not wait for nodes, which may be scaled to zero."""
    return helm_release(f"{name}-efa-device-plugin", AWS_EFA_DEVICE_PLUGIN, release_name="aws-efa-k8s-device-plugin",
                        namespace=EFA_PLUGIN_NAMESPACE, parent=parent, values=efa_plugin_values(),
                        skip_await=True, provider=provider, depends_on=after)
