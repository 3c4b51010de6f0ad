"""EksGpuCluster: the inputs of the opaque eks.Cluster / ManagedNodeGroup registrations, the network,
the node role, and argument validation."""

from __future__ import annotations

import json

import pytest
import yaml

from components.cluster import EksGpuCluster, EksGpuClusterArgs, GpuNodeGroupArgs
from components.cluster.vpc import subnet_cidrs
from components.errors import ArgumentError
from components.job.fabric import NODE_GROUP_LABEL
from runtime.agent import contract
from tests.components.componenttest import KUBECONFIG, deploy

pytestmark = pytest.mark.unit

ZONES = ("us-west-2a", "us-west-2b")
A10G = GpuNodeGroupArgs(name="a10g", instance_types=["g5.2xlarge"], min_size=0, max_size=4, desired_size=2)


def deploy_cluster(args: EksGpuClusterArgs):
    def program():
        cluster = EksGpuCluster("gpu", args)
        return {"kubeconfig": cluster.kubeconfig}

    return deploy(program)


def test_cluster_uses_api_auth_oidc_and_no_default_node_group():
    deployment = deploy_cluster(
        EksGpuClusterArgs(gpu_node_groups=[A10G], availability_zones=ZONES, version="1.34")
    )

    component = deployment.one("trainplane:cluster:EksGpuCluster")
    eks = deployment.one("eks:index:Cluster")
    role = deployment.one("aws:iam/role:Role")
    assert eks.remote and eks.parent == component.urn
    assert eks.inputs["authenticationMode"] == "API"
    assert eks.inputs["createOidcProvider"] is True
    assert eks.inputs["skipDefaultNodeGroup"] is True
    assert eks.inputs["version"] == "1.34"
    assert eks.inputs["accessEntries"]["nodes"] == {
        "principalArn": f"arn:aws:iam::123456789012:role/{role.name}",
        "type": "EC2_LINUX",
    }
    assert json.loads(role.inputs["assumeRolePolicy"])["Statement"][0]["Principal"] == {
        "Service": "ec2.amazonaws.com"
    }


def test_gpu_node_group_runs_the_nvidia_ami_tainted_and_labelled_for_gpu_pods():
    deployment = deploy_cluster(EksGpuClusterArgs(gpu_node_groups=[A10G], availability_zones=ZONES))

    group = deployment.named("gpu-gpu-a10g")
    assert group.type == "eks:index:ManagedNodeGroup"
    assert group.inputs["cluster"] == deployment.one("eks:index:Cluster").urn
    assert group.inputs["amiType"] == "AL2023_x86_64_NVIDIA"
    assert group.inputs["instanceTypes"] == ["g5.2xlarge"]
    assert group.inputs["taints"] == [
        {"key": contract.GPU_TAINT_KEY, "value": contract.GPU_TAINT_VALUE, "effect": "NO_SCHEDULE"}
    ]
    assert group.inputs["labels"] == {contract.GPU_NODE_LABEL: "true", NODE_GROUP_LABEL: "a10g"}
    assert group.inputs["scalingConfig"] == {"minSize": 0, "maxSize": 4, "desiredSize": 2}
    assert "enableEfaSupport" not in group.inputs


def test_system_node_group_is_untainted_cpu_and_node_groups_wait_for_the_role_policies():
    deployment = deploy_cluster(EksGpuClusterArgs(availability_zones=ZONES, system_nodes=3))

    system = deployment.named("gpu-system")
    policies = deployment.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
    assert "taints" not in system.inputs and system.inputs["amiType"] == "AL2023_x86_64_STANDARD"
    assert system.inputs["instanceTypes"] == ["m6i.large"]
    assert system.inputs["scalingConfig"] == {"minSize": 3, "maxSize": 3, "desiredSize": 3}
    assert {p.inputs["policyArn"].rsplit("/", 1)[1] for p in policies} == {
        "AmazonEKSWorkerNodePolicy",
        "AmazonEKS_CNI_Policy",
        "AmazonEC2ContainerRegistryReadOnly",
    }
    assert {p.urn for p in policies} <= set(system.dependencies)
    assert deployment.of_type("eks:index:ManagedNodeGroup") == [system]


def test_efa_node_group_gets_efa_and_a_placement_group_zone():
    efa = GpuNodeGroupArgs(
        name="p5", instance_types=["p5.48xlarge"], efa=True, availability_zone="us-west-2b"
    )
    deployment = deploy_cluster(EksGpuClusterArgs(gpu_node_groups=[efa], availability_zones=ZONES))

    group = deployment.named("gpu-gpu-p5")
    assert group.inputs["enableEfaSupport"] is True
    assert group.inputs["placementGroupAvailabilityZone"] == "us-west-2b"


def test_created_vpc_has_one_public_subnet_per_zone_routed_to_the_internet():
    deployment = deploy_cluster(EksGpuClusterArgs(availability_zones=ZONES, vpc_cidr="10.8.0.0/16"))

    subnets = deployment.of_type("aws:ec2/subnet:Subnet")
    routes = deployment.one("aws:ec2/routeTable:RouteTable")
    eks = deployment.one("eks:index:Cluster")
    assert sorted((s.inputs["availabilityZone"], s.inputs["cidrBlock"]) for s in subnets) == [
        ("us-west-2a", "10.8.0.0/20"),
        ("us-west-2b", "10.8.16.0/20"),
    ]
    assert all(s.inputs["mapPublicIpOnLaunch"] for s in subnets)
    assert routes.inputs["routes"][0]["cidrBlock"] == "0.0.0.0/0"
    assert len(deployment.of_type("aws:ec2/routeTableAssociation:RouteTableAssociation")) == 2
    assert eks.inputs["vpcId"] == "gpu-vpc-id"
    assert sorted(eks.inputs["publicSubnetIds"]) == ["gpu-public-us-west-2a-id", "gpu-public-us-west-2b-id"]


def test_existing_vpc_is_used_as_given_and_nodes_go_to_private_subnets():
    args = EksGpuClusterArgs(
        gpu_node_groups=[A10G],
        vpc_id="vpc-1",
        public_subnet_ids=["subnet-a"],
        private_subnet_ids=["subnet-b", "subnet-c"],
    )
    deployment = deploy_cluster(args)

    eks = deployment.one("eks:index:Cluster")
    assert not deployment.of_type("aws:ec2/vpc:Vpc")
    assert (eks.inputs["vpcId"], eks.inputs["publicSubnetIds"], eks.inputs["privateSubnetIds"]) == (
        "vpc-1",
        ["subnet-a"],
        ["subnet-b", "subnet-c"],
    )
    assert {tuple(g.inputs["subnetIds"]) for g in deployment.of_type("eks:index:ManagedNodeGroup")} == {
        ("subnet-b", "subnet-c")
    }


def test_provider_and_secret_kubeconfig_come_from_the_eks_cluster():
    deployment = deploy_cluster(EksGpuClusterArgs(availability_zones=ZONES))

    provider = deployment.one("pulumi:providers:kubernetes")
    assert deployment.one("eks:index:Cluster").urn in provider.dependencies
    assert yaml.safe_load(deployment.outputs["kubeconfig"]) == yaml.safe_load(KUBECONFIG)
    assert "kubeconfig" in deployment.secret_outputs


def test_subnet_cidrs_split_the_vpc_evenly():
    assert subnet_cidrs("10.0.0.0/16", 3) == ["10.0.0.0/20", "10.0.16.0/20", "10.0.32.0/20"]


@pytest.mark.parametrize(
    ("kwargs", "field", "message"),
    [
        ({"instance_types": []}, "instance_types", "list at least one value"),
        ({"instance_types": "g5.xlarge"}, "instance_types", "must be a list of strings"),
        ({"min_size": 3, "max_size": 4, "desired_size": 2}, "desired_size",
         r"^desired_size=2: must be from 3 to 4; use min_size \(3\) <= desired_size <= max_size \(4\)$"),
        ({"min_size": 3, "desired_size": 2}, "max_size", r"^max_size=1: must be 3 or more; use min_size \(3\) <="),
        ({"max_size": 0, "desired_size": 0}, "max_size", ">= 1"),
        ({"efa": True}, "availability_zone", "name the placement group's zone"),
        ({"capacity_type": "RESERVED"}, "capacity_type", "ON_DEMAND, SPOT"),
        ({"name": "A10G"}, "name", "lower-case"),
    ],
)
def test_gpu_node_group_args_reject_bad_values(kwargs, field, message):
    base = {"name": "a10g", "instance_types": ["g5.xlarge"]}
    with pytest.raises(ArgumentError, match=message) as caught:
        GpuNodeGroupArgs(**{**base, **kwargs})
    assert caught.value.field == field


@pytest.mark.parametrize(
    ("kwargs", "field", "message"),
    [
        ({}, "availability_zones", "list 2 or more zones"),
        ({"availability_zones": ["us-west-2a"]}, "availability_zones", "list 2 or more zones"),
        ({"availability_zones": ZONES, "public_subnet_ids": ["subnet-a"]}, "vpc_id", "set vpc_id too"),
        ({"vpc_id": "vpc-1", "public_subnet_ids": ["subnet-a"]}, "public_subnet_ids", "at least 2 subnets"),
        ({"availability_zones": ZONES, "vpc_cidr": "10.0.0.0/26"}, "vpc_cidr", "a /24 or larger"),
        ({"availability_zones": ZONES, "vpc_cidr": "not-a-cidr"}, "vpc_cidr", "IPv4 CIDR"),
        ({"availability_zones": ZONES, "gpu_node_groups": [A10G, A10G]}, "gpu_node_groups", "its own name"),
        ({"availability_zones": ZONES, "system_nodes": 0}, "system_nodes", ">= 1"),
        (
            {
                "availability_zones": ZONES,
                "gpu_node_groups": [
                    GpuNodeGroupArgs(
                        name="p5", instance_types=["p5.48xlarge"], efa=True, availability_zone="eu-west-1a"
                    )
                ],
            },
            "gpu_node_groups[0].availability_zone",
            "pick one of availability_zones",
        ),
    ],
)
def test_cluster_args_reject_inconsistent_networks_and_groups(kwargs, field, message):
    with pytest.raises(ArgumentError, match=message) as caught:
        EksGpuClusterArgs(**kwargs)
    assert caught.value.field == field


def test_the_vpc_cni_enforces_network_policies():
    """pulumi/pulumi-eks v4.3.0 ``nodejs/eks/addons/cni-addon.ts``: ``vpcCniOptions.enableNetworkPolicy``
    becomes the VPC CNI add-on's ``enableNetworkPolicy: "true"`` configuration value
    (``mergeConfigurationValues``); the add-on's network policy agent, which enforces NetworkPolicy
    objects, is off otherwise (EKS User Guide, "Restrict Pod network traffic with Kubernetes network
    policies"), leaving every job's NetworkPolicy accepted and ignored."""
    deployment = deploy_cluster(EksGpuClusterArgs(gpu_node_groups=[A10G], availability_zones=ZONES))

    assert deployment.one("eks:index:Cluster").inputs["vpcCniOptions"]["enableNetworkPolicy"] is True


def test_gpu_node_group_sizes_survive_the_autoscaler_and_the_system_group_names_its_ami():
    """pulumi/pulumi-eks v4.3.0 ``nodejs/eks/nodes/nodegroup.ts``: ``ignoreScalingChanges`` puts
    ``scalingConfig.desiredSize`` in the managed node group's ``ignoreChanges``, so a size the cluster
    autoscaler chose is not reset by the next ``pulumi up``; without it the desired size (2 of 0..4) is
    re-applied. An unset ``amiType`` leaves the AMI to the EKS API's default for the version."""
    deployment = deploy_cluster(EksGpuClusterArgs(gpu_node_groups=[A10G], availability_zones=ZONES))

    assert deployment.named("gpu-gpu-a10g").inputs["ignoreScalingChanges"] is True
    system = deployment.named("gpu-system").inputs
    assert system["amiType"] == "AL2023_x86_64_STANDARD"
    assert "ignoreScalingChanges" not in system, "the system group's size is fixed; a changed size must apply"
