"""Atomic scale-up of a whole gang under Pulumi mocks: the Kueue add-on's ``atomic_scale_up`` renders the
ProvisioningRequest admission check (kubernetes-sigs/kueue v0.19.2), the EKS cluster's ``provisioning_requests``
gives the Cluster Autoscaler its flag and the ProvisioningRequest CRD (kubernetes/autoscaler tag
cluster-autoscaler-chart-9.59.0), and the stack refuses the combinations where no autoscaler would act on it."""

from __future__ import annotations

from typing import Any

import pytest

from components.addons import ClusterQueueArgs, Kueue, KueueArgs, ResourceFlavorArgs
from components.cluster import EksGpuCluster, EksGpuClusterArgs, GpuNodeGroupArgs
from components.errors import ArgumentError
from tests.components.componenttest import Deployment, deploy, stack_file, unsecret
from tests.components.schemacheck import validate_manifest
from tests.components.stackconfigtest import KUEUE, assert_refused, parse
from tests.components.test_addons_components import deploy_addon, kueue_manager_config

pytestmark = pytest.mark.unit

API = "kubernetes:kueue.x-k8s.io/v1beta2"
RELEASE = "kubernetes:helm.sh/v3:Release"
CONFIG_FILE = "kubernetes:yaml/v2:ConfigFile"
QUEUES = {"flavors": [ResourceFlavorArgs(name="a10g", node_labels={"trainplane.dev/node-group": "a10g"})],
          "cluster_queues": [ClusterQueueArgs(name="gpus", quotas={"a10g": {"cpu": "16", "nvidia.com/gpu": "4"}})]}
A10G = GpuNodeGroupArgs(name="a10g", instance_types=["g5.2xlarge"], min_size=0, max_size=4, desired_size=0)
CRD_URL = ("https://raw.githubusercontent.com/kubernetes/autoscaler/cluster-autoscaler-chart-9.59.0/"
           "cluster-autoscaler/apis/config/crd/autoscaling.x-k8s.io_provisioningrequests.yaml")


def kueue(**args: Any) -> Deployment:
    return deploy_addon(lambda opts: Kueue("queues", KueueArgs(**QUEUES, **args), opts=opts))


def manifest(deployment: Deployment, kind: str) -> dict[str, Any]:
    reg = deployment.one(f"{API}:{kind}")
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind, **unsecret(reg.inputs)}


def test_kueue_checks_every_cluster_queue_with_an_atomic_provisioning_request():
    """``apis/kueue/v1beta2/provisioningrequestconfig_types.go`` (controller ``kueue.x-k8s.io/provisioning-request``,
    ``provisioningClassName``, ``managedResources``), ``admissioncheck_types.go`` (``controllerName``,
    ``parameters``: apiGroup, kind, name) and ``clusterqueue_types.go`` (v1beta2's
    ``admissionChecksStrategy.admissionChecks``, each a ``name`` with optional ``onFlavors``)."""
    deployment = kueue(atomic_scale_up=True)

    config = deployment.one(f"{API}:ProvisioningRequestConfig")
    check = deployment.one(f"{API}:AdmissionCheck")
    queue = deployment.one(f"{API}:ClusterQueue")
    assert config.inputs["spec"] == {"provisioningClassName": "best-effort-atomic-scale-up.autoscaling.x-k8s.io",
                                     "managedResources": ["nvidia.com/gpu"]}
    assert check.inputs["spec"] == {"controllerName": "kueue.x-k8s.io/provisioning-request", "parameters": {
        "apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig",
        "name": config.inputs["metadata"]["name"]}}
    assert queue.inputs["spec"]["admissionChecksStrategy"] == {
        "admissionChecks": [{"name": check.inputs["metadata"]["name"]}]}
    validate_manifest(manifest(deployment, "ClusterQueue"))
    release = deployment.one(RELEASE)
    assert {release.urn, config.urn} <= set(check.dependencies)
    assert check.urn in queue.dependencies


def test_atomic_scale_up_restarts_kueue_with_the_eviction_clean_up_gate_named():
    """The manager's pod template carries the config's checksum (kueue v0.19.2
    ``charts/kueue/templates/manager/manager.yaml``), so a changed config restarts the manager, which sets up the
    provisioning controller only if the ProvisioningRequest API is served then (``cmd/kueue/main.go``)."""
    assert "featureGates" not in kueue_manager_config(kueue())
    assert kueue_manager_config(kueue(atomic_scale_up=True))["featureGates"] == {
        "CleanupProvisioningRequestsOnEviction": True}


def test_without_atomic_scale_up_kueue_has_no_admission_check():
    deployment = kueue()

    assert not deployment.of_type(f"{API}:AdmissionCheck")
    assert not deployment.of_type(f"{API}:ProvisioningRequestConfig")
    assert "admissionChecksStrategy" not in deployment.one(f"{API}:ClusterQueue").inputs["spec"]


def test_atomic_scale_up_is_a_boolean_named_in_its_refusal():
    with pytest.raises(ArgumentError) as caught:
        KueueArgs(atomic_scale_up="yes")  # type: ignore[arg-type]
    assert caught.value.field == "atomic_scale_up"


def cluster(**overrides: Any) -> Deployment:
    args = EksGpuClusterArgs(gpu_node_groups=[A10G], availability_zones=("us-west-2a", "us-west-2b"),
                             cluster_name="gpu", region="us-west-2", autoscaler=True, **overrides)
    return deploy(lambda: {"kubeconfig": EksGpuCluster("gpu", args).kubeconfig})


def autoscaler(deployment: Deployment) -> Any:
    return next(r for r in deployment.of_type(RELEASE) if r.inputs["chart"] == "cluster-autoscaler")


def test_the_autoscaler_handles_provisioning_requests_with_their_crd_applied_first():
    """``cluster-autoscaler/config/flags/flags.go``: ``enable-provisioning-requests`` (default false); the chart
    passes ``extraArgs`` as ``--<key>=<value>`` and installs no CRDs, its ClusterRole grants
    ``provisioningrequests``; the FAQ says to deploy
    ``apis/config/crd/autoscaling.x-k8s.io_provisioningrequests.yaml``."""
    deployment = cluster(provisioning_requests=True)

    release = autoscaler(deployment)
    assert release.inputs["values"]["extraArgs"]["enable-provisioning-requests"] is True
    assert release.inputs["values"]["rbac"] == {"serviceAccount": {"create": True, "name": "cluster-autoscaler"}}, (
        "the chart's own ClusterRole (rbac.create, rbac.clusterScoped by default) covers ProvisioningRequests")
    crd = deployment.one(CONFIG_FILE)
    assert crd.inputs["file"] == CRD_URL
    assert crd.urn in release.dependencies
    assert crd.provider.startswith(deployment.named("gpu-provider").urn)


def test_without_provisioning_requests_the_autoscaler_keeps_its_flags():
    deployment = cluster()

    assert "enable-provisioning-requests" not in autoscaler(deployment).inputs["values"]["extraArgs"]
    assert not deployment.of_type(CONFIG_FILE)


def test_provisioning_requests_without_the_autoscaler_are_refused():
    with pytest.raises(ArgumentError) as caught:
        EksGpuClusterArgs(availability_zones=("us-west-2a", "us-west-2b"), provisioning_requests=True)
    assert caught.value.field == "provisioning_requests"
    assert "set autoscaler" in caught.value.fix


STACK_KUEUE = stack_file("aws-gpu")["trainplane:kueue"]
"""The aws-gpu stack's Kueue: atomic scale-up on, one queue for its EFA group."""
PLAIN_KUEUE = {k: v for k, v in STACK_KUEUE.items() if k != "atomicScaleUp"}


@pytest.mark.usefixtures("home")
def test_the_aws_gpu_stack_turns_the_autoscalers_provisioning_requests_on_for_atomic_kueue():
    config = parse("aws-gpu")

    assert STACK_KUEUE["atomicScaleUp"] is True
    assert config.addons.kueue is not None and config.addons.kueue.atomic_scale_up is True
    assert config.cluster.provisioning_requests is True  # type: ignore[union-attr]
    assert parse("aws-gpu", kueue=PLAIN_KUEUE).cluster.provisioning_requests is False  # type: ignore[union-attr]


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize(("stack", "overrides", "value", "fix"), [
    pytest.param("aws-gpu", {"eksAutoscaler": False}, "True", "set trainplane:eksAutoscaler: true",
                 id="eks without the autoscaler"),
    pytest.param("local", {"addons": ["kueue"], "kueue": {**KUEUE, "atomicScaleUp": True}}, "True",
                 "kind has no Cluster Autoscaler", id="kind"),
    pytest.param("existing", {"kueue": {**KUEUE, "atomicScaleUp": True}}, "True",
                 "the stack does not configure an existing cluster's autoscaler", id="existing"),
    pytest.param("aws-gpu", {"kueue": {**STACK_KUEUE, "atomicScaleUp": "yes"}}, "'yes'", "use true or false",
                 id="not a boolean"),
])
def test_atomic_scale_up_where_no_autoscaler_acts_on_it_is_refused_at_preview(stack, overrides, value, fix):
    assert_refused(stack, overrides, "trainplane:kueue.atomicScaleUp", value, fix)


@pytest.mark.usefixtures("home")
def test_atomic_scale_up_without_the_kueue_add_on_is_refused_at_preview():
    assert_refused("aws-gpu", {"addons": ["device-plugin", "volcano"]}, "trainplane:kueue", str(STACK_KUEUE),
                   "add kueue to trainplane:addons")
