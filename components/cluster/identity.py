"""IAM roles for the cluster's own controllers (CSI drivers, the autoscaler), bound by EKS Pod Identity.

EKS Pod Identity needs no per-cluster trust: a role trusts the service principal ``pods.eks.amazonaws.com``
(``sts:AssumeRole`` and ``sts:TagSession``), and an association names the cluster, namespace and
ServiceAccount; the ``eks-pod-identity-agent`` add-on hands the credentials to the pods (EKS User Guide,
awsdocs/amazon-eks-user-guide ``latest/ug/manage-access/aws-access/service-accounts.adoc``, "EKS Pod
Identities" and ``pod-id-agent-setup.adoc``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import pulumi
import pulumi_aws as aws

POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"
POD_IDENTITY_AGENT = "eks-pod-identity-agent"
TRUST_POLICY = json.dumps({
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Principal": {"Service": POD_IDENTITY_PRINCIPAL},
                   "Action": ["sts:AssumeRole", "sts:TagSession"]}],
})
"""The trust policy of every role bound by EKS Pod Identity."""


def pod_identity_role(
    name: str,
    parent: pulumi.Resource,
    managed_policies: Sequence[str] = (),
    inline_policy: Optional[Mapping[str, Any]] = None,
) -> tuple[aws.iam.Role, list[pulumi.Resource]]:
    """A role that EKS Pod Identity may hand to pods, with its policies.

    Args:
        name: Pulumi name of the role; its policies are named after it.
        parent: The component that owns them.
        managed_policies: ARNs of AWS managed policies to attach.
        inline_policy: A policy document to attach as an inline policy.

    Returns:
        The role and its policy resources (what an association should wait for).
    """
    opts = pulumi.ResourceOptions(parent=parent)
    role = aws.iam.Role(name, assume_role_policy=TRUST_POLICY, opts=opts)
    policies: list[pulumi.Resource] = [
        aws.iam.RolePolicyAttachment(f"{name}-{arn.rsplit('/', 1)[1]}", role=role.name, policy_arn=arn, opts=opts)
        for arn in managed_policies
    ]
    if inline_policy is not None:
        policies.append(aws.iam.RolePolicy(f"{name}-policy", role=role.id, policy=json.dumps(inline_policy), opts=opts))
    return role, policies
