"""A minimal public VPC for ``EksGpuCluster``: one public subnet per availability zone."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.errors import ArgumentError

SUBNET_PREFIX_BITS = 4
"""Each subnet is the VPC CIDR split 16 ways (a /16 VPC gives /20 subnets of 4,096 addresses)."""
ELB_ROLE_TAG = {"kubernetes.io/role/elb": "1"}
"""Tag that lets the AWS load balancer controller place internet-facing load balancers."""


@dataclass(frozen=True)
class Network:
    """Where the cluster and its nodes live.

    Attributes:
        vpc_id: The VPC.
        public_subnet_ids: Subnets whose instances get public addresses.
        private_subnet_ids: Subnets routed through NAT; empty for a created network.
    """

    vpc_id: pulumi.Input[str]
    public_subnet_ids: Sequence[pulumi.Input[str]]
    private_subnet_ids: Sequence[pulumi.Input[str]]


def subnet_cidrs(vpc_cidr: str, count: int) -> list[str]:
    """Split ``vpc_cidr`` into ``count`` equal, non-overlapping subnets.

    Args:
        vpc_cidr: The VPC's IPv4 CIDR block, e.g. ``10.0.0.0/16``.
        count: Number of subnets wanted (one per availability zone), at most 16.

    Returns:
        ``count`` CIDR blocks, each ``SUBNET_PREFIX_BITS`` bits longer than the VPC's prefix.

    Raises:
        ArgumentError: ``vpc_cidr`` is not an IPv4 network or cannot hold ``count`` subnets.
    """
    try:
        network = ipaddress.IPv4Network(vpc_cidr)
    except ValueError as exc:
        raise ArgumentError("vpc_cidr", vpc_cidr, f"not an IPv4 CIDR block ({exc})",
                            "use an IPv4 CIDR block such as 10.0.0.0/16") from exc
    if network.prefixlen + SUBNET_PREFIX_BITS > 28 or count > 2**SUBNET_PREFIX_BITS:
        raise ArgumentError("vpc_cidr", vpc_cidr, f"cannot hold {count} subnets",
                            f"use a /24 or larger block for {count} subnets")
    return [str(subnet) for subnet in network.subnets(prefixlen_diff=SUBNET_PREFIX_BITS)][:count]


def create_public_network(name: str, vpc_cidr: str, zones: Sequence[str], parent: pulumi.Resource) -> Network:
    """Create a VPC with an internet gateway and one public subnet per zone, as children of ``parent``.

    Nodes in these subnets get public IPv4 addresses; the EKS security groups admit only
    cluster traffic. Bring your own VPC (``vpc_id`` and subnets) for private nodes behind NAT.

    Args:
        name: Prefix of the child resource names.
        vpc_cidr: The VPC's IPv4 CIDR block.
        zones: Availability zones, one subnet each.
        parent: The component that owns the network.

    Returns:
        The created VPC and public subnets.
    """
    child = pulumi.ResourceOptions(parent=parent)
    vpc = aws.ec2.Vpc(
        f"{name}-vpc", cidr_block=vpc_cidr, enable_dns_hostnames=True, enable_dns_support=True, opts=child
    )
    gateway = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=vpc.id, opts=child)
    routes = aws.ec2.RouteTable(
        f"{name}-public",
        vpc_id=vpc.id,
        routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=gateway.id)],
        opts=child,
    )
    subnet_ids = []
    for zone, cidr in zip(zones, subnet_cidrs(vpc_cidr, len(zones))):
        subnet = aws.ec2.Subnet(
            f"{name}-public-{zone}",
            vpc_id=vpc.id,
            cidr_block=cidr,
            availability_zone=zone,
            map_public_ip_on_launch=True,
            tags=ELB_ROLE_TAG,
            opts=child,
        )
        aws.ec2.RouteTableAssociation(
            f"{name}-public-{zone}-routes", subnet_id=subnet.id, route_table_id=routes.id, opts=child
        )
        subnet_ids.append(subnet.id)
    return Network(vpc_id=vpc.id, public_subnet_ids=subnet_ids, private_subnet_ids=[])
