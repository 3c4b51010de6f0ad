"""The EKS cluster's platform add-ons under Pulumi mocks: storage drivers and StorageClasses, the EFA device plugin,
the Cluster Autoscaler (its values checked against the chart's documented keys) and their IAM roles."""

from __future__ import annotations

import json
from typing import Any

import pytest

from components.addons import NvidiaDevicePluginArgs
from components.addons.device_plugin import device_plugin_values
from components.cluster import EksGpuCluster, EksGpuClusterArgs, GpuNodeGroupArgs
from components.cluster.autoscaling import AUTOSCALER_POLICY
from components.errors import ArgumentError
from tests.components.componenttest import Deployment, Registration, deploy, node_group_asg, unsecret
from tests.components.schemacheck import validate_manifest

pytestmark = pytest.mark.unit

ZONES = ("us-west-2a", "us-west-2b")
A10G = GpuNodeGroupArgs(name="a10g", instance_types=["g5.2xlarge"], min_size=0, max_size=4, desired_size=0)
P5 = GpuNodeGroupArgs(name="p5", instance_types=["p5.48xlarge"], min_size=0, max_size=2, desired_size=0, efa=True,
                      availability_zone="us-west-2a")
RELEASE = "kubernetes:helm.sh/v3:Release"
ADDON = "aws:eks/addon:Addon"
ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"
STORAGE_CLASS = "kubernetes:storage.k8s.io/v1:StorageClass"

CHART_TOP_LEVEL_KEYS = frozenset({
    "affinity", "additionalLabels", "autoDiscovery", "autoscalingGroups", "autoscalingGroupsnamePrefix",
    "awsAccessKeyID", "awsRegion", "awsSecretAccessKey", "azureClientID", "azureClientSecret", "azureResourceGroup",
    "azureSubscriptionID", "azureTenantID", "azureUseManagedIdentityExtension", "azureUserAssignedIdentityID",
    "azureUseWorkloadIdentityExtension", "azureVMType", "azureEnableForceDelete", "azureEnableVMSSEtag",
    "civoApiUrl", "civoApiKey", "civoClusterID", "civoRegion", "cloudConfigPath", "cloudProvider",
    "clusterAPICloudConfigPath", "clusterAPIConfigMapsNamespace", "clusterAPIKubeconfigSecret", "clusterAPIMode",
    "clusterAPIWorkloadKubeconfigPath", "containerSecurityContext", "deployment", "dnsConfig", "dnsPolicy",
    "envFromConfigMap", "envFromSecret", "expanderPriorities", "extraArgs", "customArgs", "extraEnv",
    "extraEnvConfigMaps", "extraEnvSecrets", "extraObjects", "extraVolumeMounts", "extraVolumes",
    "extraVolumeSecrets", "initContainers", "fullnameOverride", "hostNetwork", "image", "kubeTargetVersionOverride",
    "kwokConfigMapName", "magnumCABundlePath", "magnumClusterName", "nameOverride", "nodeSelector", "podAnnotations",
    "podDisruptionBudget", "podLabels", "priorityClassName", "priorityConfigMapAnnotations", "prometheusRule", "rbac",
    "replicaCount", "resources", "revisionHistoryLimit", "securityContext", "service", "serviceMonitor",
    "tolerations", "topologySpreadConstraints", "updateStrategy", "vpa", "secretKeyRefNameOverride",
})
"""The top-level keys of the Cluster Autoscaler chart's values (kubernetes/autoscaler tag
cluster-autoscaler-chart-9.59.0, ``cluster-autoscaler/charts/cluster-autoscaler/values.yaml``), transcribed."""
CHART_NESTED_KEYS = {
    "autoDiscovery": {"clusterName", "namespace", "tags", "roles", "labels"},
    "rbac": {"create", "pspEnabled", "clusterScoped", "annotations", "serviceAccount", "additionalRules"},
    "rbac.serviceAccount": {"annotations", "create", "name", "automountServiceAccountToken"},
}
"""The keys under the nested values the component sets, from the same file."""
FAQ_FLAGS = frozenset({"expander", "balance-similar-node-groups", "scale-down-unneeded-time",
                       "scale-down-delay-after-add", "max-node-provision-time", "enable-provisioning-requests"})
"""Flags of the FAQ's parameter table (``cluster-autoscaler/FAQ.md`` at the same tag, "What are the parameters to
CA?"), the chart's ``extraArgs`` passes as ``--<flag>=<value>``; ``scale-down-enabled`` is marked deprecated there
and left out."""
README_ACTIONS = [
    ["autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeAutoScalingInstances",
     "autoscaling:DescribeLaunchConfigurations", "autoscaling:DescribeScalingActivities", "ec2:DescribeImages",
     "ec2:DescribeInstanceTypes", "ec2:DescribeLaunchTemplateVersions",
     "ec2:GetInstanceTypesFromInstanceRequirements", "eks:DescribeNodegroup"],
    ["autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"],
]
"""The IAM policy for auto-discovery in ``cluster-autoscaler/cloudprovider/aws/README.md`` at the same tag."""
EFA_CHART_KEYS = frozenset({"image", "securityContext", "supportedInstanceLabels", "resources", "nodeSelector",
                            "updateStrategy", "tolerations", "additionalPodAnnotations", "additionalPodLabels",
                            "nameOverride", "fullnameOverride", "imagePullSecrets"})
"""The top-level keys of aws/eks-charts ``stable/aws-efa-k8s-device-plugin/values.yaml`` (chart v0.5.30)."""
FSX_CHART_KEYS = {"controller": {"serviceAccount"}, "node": {"tolerateAllTaints"}}
"""Keys the FSx chart's values use (kubernetes-sigs/aws-fsx-csi-driver helm-chart-aws-fsx-csi-driver-1.17.0)."""


def run(**overrides: Any) -> Deployment:
    args = EksGpuClusterArgs(**{"gpu_node_groups": [A10G], "availability_zones": ZONES, "cluster_name": "gpu",
                                "region": "us-west-2", **overrides})
    return deploy(lambda: {"kubeconfig": EksGpuCluster("gpu", args).kubeconfig})


def trust(deployment: Deployment, role_arn: str) -> dict[str, Any]:
    role = next(r for r in deployment.of_type("aws:iam/role:Role") if role_arn.endswith(f"/{r.name}"))
    return json.loads(role.inputs["assumeRolePolicy"])


def storage_manifest(reg: Registration) -> dict[str, Any]:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", **unsecret(reg.inputs)}


def test_storage_drivers_get_roles_by_pod_identity_and_their_classes_validate() -> None:
    deployment = run(storage=["ebs", "efs", "fsx"])

    addons = {r.inputs["addonName"]: r for r in deployment.of_type(ADDON)}
    assert set(addons) == {"eks-pod-identity-agent", "aws-ebs-csi-driver", "aws-efs-csi-driver"}
    for addon, account in (("aws-ebs-csi-driver", "ebs-csi-controller-sa"),
                           ("aws-efs-csi-driver", "efs-csi-controller-sa")):
        (association,) = addons[addon].inputs["podIdentityAssociations"]
        assert association["serviceAccount"] == account
        statement = trust(deployment, association["roleArn"])["Statement"][0]
        assert statement["Principal"] == {"Service": "pods.eks.amazonaws.com"}
        assert set(statement["Action"]) == {"sts:AssumeRole", "sts:TagSession"}
        assert addons["eks-pod-identity-agent"].urn in addons[addon].dependencies
    policies = {p.inputs["policyArn"].rsplit("/", 1)[1]
                for p in deployment.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")}
    assert {"AmazonEBSCSIDriverPolicy", "AmazonEFSCSIDriverPolicy", "AmazonFSxFullAccess"} <= policies
    classes = {r.inputs["metadata"]["name"]: r for r in deployment.of_type(STORAGE_CLASS)}
    assert set(classes) == {"gp3", "efs", "fsx-lustre"}
    for reg in classes.values():
        validate_manifest(storage_manifest(reg))
        assert reg.provider.startswith(deployment.named("gpu-provider").urn)
    assert classes["gp3"].inputs["metadata"]["annotations"] == {"storageclass.kubernetes.io/is-default-class": "true"}
    assert classes["gp3"].inputs["parameters"] == {"type": "gp3", "encrypted": "true"}
    assert classes["efs"].inputs["parameters"]["provisioningMode"] == "efs-ap"
    assert classes["fsx-lustre"].inputs["parameters"]["deploymentType"] == "SCRATCH_2"


def test_efs_has_a_mount_target_per_node_subnet_behind_an_nfs_security_group() -> None:
    deployment = run(storage=["efs"])

    targets = deployment.of_type("aws:efs/mountTarget:MountTarget")
    subnets = deployment.of_type("aws:ec2/subnet:Subnet")
    assert len(targets) == len(subnets) == 2
    group = deployment.named("gpu-efs-sg")
    assert [(r["fromPort"], r["toPort"], r["protocol"]) for r in group.inputs["ingress"]] == [(2049, 2049, "tcp")]
    assert deployment.one("aws:efs/fileSystem:FileSystem").inputs["encrypted"] is True


def test_fsx_driver_is_the_pinned_chart_with_its_service_account_bound() -> None:
    deployment = run(storage=["fsx"])

    release = next(r for r in deployment.of_type(RELEASE) if r.inputs["chart"] == "aws-fsx-csi-driver")
    assert release.inputs["version"] == "1.17.0"
    assert release.inputs["repositoryOpts"] == {"repo": "https://kubernetes-sigs.github.io/aws-fsx-csi-driver"}
    values = release.inputs["values"]
    assert {k: set(v) for k, v in values.items()} == FSX_CHART_KEYS
    association = deployment.named("gpu-fsx-csi")
    assert association.type == ASSOCIATION
    assert (association.inputs["namespace"], association.inputs["serviceAccount"]) == (
        release.inputs["namespace"], values["controller"]["serviceAccount"]["name"])
    group = deployment.named("gpu-fsx-sg")
    assert sorted((r["fromPort"], r["toPort"]) for r in group.inputs["ingress"]) == [(988, 988), (1018, 1023)]


@pytest.mark.parametrize("provisioning_requests", [False, True])
def test_autoscaler_values_use_only_the_charts_documented_keys_and_flags(provisioning_requests: bool) -> None:
    deployment = run(autoscaler=True, provisioning_requests=provisioning_requests)

    release = next(r for r in deployment.of_type(RELEASE) if r.inputs["chart"] == "cluster-autoscaler")
    assert (release.inputs["version"], release.inputs["repositoryOpts"]) == (
        "9.59.0", {"repo": "https://kubernetes.github.io/autoscaler"})
    values = release.inputs["values"]
    assert set(values) <= CHART_TOP_LEVEL_KEYS
    assert set(values["autoDiscovery"]) <= CHART_NESTED_KEYS["autoDiscovery"]
    assert set(values["rbac"]) <= CHART_NESTED_KEYS["rbac"]
    assert set(values["rbac"]["serviceAccount"]) <= CHART_NESTED_KEYS["rbac.serviceAccount"]
    assert set(values["extraArgs"]) <= FAQ_FLAGS
    assert values["autoDiscovery"]["clusterName"] == "gpu" and values["awsRegion"] == "us-west-2"
    assert values["cloudProvider"] == "aws"
    assert values["extraArgs"]["scale-down-unneeded-time"] == "10m"


def test_autoscaler_role_is_the_readmes_policy_bound_to_its_service_account() -> None:
    deployment = run(autoscaler=True)

    policy = json.loads(deployment.one("aws:iam/rolePolicy:RolePolicy").inputs["policy"])
    assert [s["Action"] for s in policy["Statement"]] == README_ACTIONS == [
        s["Action"] for s in AUTOSCALER_POLICY["Statement"]]
    association = deployment.named("gpu-autoscaler")
    release = next(r for r in deployment.of_type(RELEASE) if r.inputs["chart"] == "cluster-autoscaler")
    assert (association.inputs["namespace"], association.inputs["serviceAccount"]) == (
        release.inputs["namespace"], release.inputs["values"]["rbac"]["serviceAccount"]["name"])
    assert association.urn in release.dependencies
    assert trust(deployment, association.inputs["roleArn"])["Statement"][0]["Principal"] == {
        "Service": "pods.eks.amazonaws.com"}


def test_gpu_groups_at_zero_keep_their_size_for_the_autoscaler() -> None:
    deployment = run(autoscaler=True)

    group = deployment.named("gpu-gpu-a10g")
    assert group.inputs["scalingConfig"] == {"minSize": 0, "maxSize": 4, "desiredSize": 0}
    assert group.inputs["ignoreScalingChanges"] is True


def test_an_efa_group_scales_from_zero_for_efa_pods_through_its_asg_tags() -> None:
    deployment = run(gpu_node_groups=[A10G, P5], autoscaler=True)

    assert deployment.named("gpu-gpu-p5").inputs["nodeGroupName"] == "p5"
    assert "nodeGroupName" not in deployment.named("gpu-gpu-a10g").inputs
    tags = {t.inputs["tag"]["key"]: t.inputs for t in deployment.of_type("aws:autoscaling/tag:Tag")}
    prefix = "k8s.io/cluster-autoscaler/node-template/resources/"
    assert {k: v["tag"]["value"] for k, v in tags.items()} == {
        prefix + "vpc.amazonaws.com/efa": "32", prefix + "hugepages-2Mi": "10256Mi"}
    assert all(t["autoscalingGroupName"] == node_group_asg("p5") and t["tag"]["propagateAtLaunch"] is False
               for t in tags.values())


def test_efa_groups_get_the_device_plugin_tolerating_the_gpu_taint() -> None:
    without = run()
    deployment = run(gpu_node_groups=[A10G, P5])

    assert not [r for r in without.of_type(RELEASE) if r.inputs["chart"] == "aws-efa-k8s-device-plugin"]
    (release,) = [r for r in deployment.of_type(RELEASE) if r.inputs["chart"] == "aws-efa-k8s-device-plugin"]
    assert (release.inputs["version"], release.inputs["repositoryOpts"]) == (
        "v0.5.30", {"repo": "https://aws.github.io/eks-charts"})
    assert set(release.inputs["values"]) <= EFA_CHART_KEYS
    assert release.inputs["values"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}], "the chart adds CriticalAddonsOnly"
    assert release.inputs["skipAwait"] is True


def test_a_plain_cluster_installs_no_platform_add_on() -> None:
    deployment = run(cluster_name=None, region=None)

    assert not deployment.of_type(ADDON) and not deployment.of_type(RELEASE)


@pytest.mark.parametrize(("overrides", "field"), [
    ({"storage": ["nfs"]}, "storage"),
    ({"autoscaler": "yes"}, "autoscaler"),
    ({"cluster_name": ""}, "cluster_name"),
])
def test_bad_platform_settings_name_the_field(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(ArgumentError) as caught:
        EksGpuClusterArgs(availability_zones=ZONES, **overrides)
    assert caught.value.field == field


def test_the_autoscaler_without_a_region_is_refused() -> None:
    with pytest.raises(ArgumentError) as caught:
        run(autoscaler=True, region=None)
    assert caught.value.field == "region"


def test_the_nvidia_device_plugin_keeps_its_mofed_default_unless_told() -> None:
    """``mofedEnabled`` is a top-level value of the chart (NVIDIA/k8s-device-plugin v0.19.0
    ``deployments/helm/nvidia-device-plugin/values.yaml``: ``mofedEnabled: null``, rendered as ``MOFED_ENABLED``
    only when a bool); the plugin's flag defaults to true (``cmd/nvidia-device-plugin/main.go``)."""
    assert "mofedEnabled" not in device_plugin_values()
    assert device_plugin_values(False)["mofedEnabled"] is False
    with pytest.raises(ArgumentError):
        NvidiaDevicePluginArgs(mofed_enabled="no")  # type: ignore[arg-type]
