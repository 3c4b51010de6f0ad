"""Add-on components under mocks: pinned charts and manifests, await behaviour, the order of the
custom resources after the release that installs their CRD, providers, and the training
operator's transforms."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s
import pytest

from components.addons import (
    ClusterQueueArgs,
    Kueue,
    KueueArgs,
    LocalQueueArgs,
    NvidiaDevicePlugin,
    ResourceFlavorArgs,
    TrainingOperator,
    TrainingOperatorArgs,
    Volcano,
    VolcanoArgs,
)
from components.addons.training_operator import with_gang_scheduler
from components.addons.versions import KUEUE, NVIDIA_DEVICE_PLUGIN, VOLCANO
from components.addons.volcano import volcano_queue
from components.cluster import GpuNodeGroupArgs
from components.cluster.eks import gpu_node_group_settings
from tests.components.componenttest import KUBECONFIG, deploy, tolerates

RELEASE = "kubernetes:helm.sh/v3:Release"


def deploy_addon(build):
    def program():
        provider = k8s.Provider("k8s", kubeconfig=KUBECONFIG)
        build(pulumi.ResourceOptions(provider=provider))
        return {}

    return deploy(program)


def test_device_plugin_is_a_pinned_release_that_does_not_wait_for_gpu_nodes():
    deployment = deploy_addon(lambda opts: NvidiaDevicePlugin("gpu", opts=opts))

    release = deployment.one(RELEASE)
    assert release.parent == deployment.one("trainplane:addons:NvidiaDevicePlugin").urn
    assert release.name == "gpu-release"
    assert (release.inputs["chart"], release.inputs["version"]) == ("nvidia-device-plugin", "0.19.0")
    assert release.inputs["repositoryOpts"] == {"repo": "https://nvidia.github.io/k8s-device-plugin"}
    assert release.inputs["skipAwait"] is True
    assert release.provider.startswith(deployment.one("pulumi:providers:kubernetes").urn)


def test_device_plugin_tolerates_the_taint_gpu_node_groups_carry():
    deployment = deploy_addon(lambda opts: NvidiaDevicePlugin("gpu", opts=opts))

    (taint,) = gpu_node_group_settings(GpuNodeGroupArgs(name="g", instance_types=["g5.xlarge"]))["taints"]
    tolerations = deployment.one(RELEASE).inputs["values"]["tolerations"]
    assert any(tolerates(t, taint) for t in tolerations)


def test_volcano_release_waits_and_the_queue_comes_after_it():
    deployment = deploy_addon(lambda opts: Volcano("sched", VolcanoArgs(queue="research"), opts=opts))

    release = deployment.one(RELEASE)
    queue = deployment.one("kubernetes:scheduling.volcano.sh/v1beta1:Queue")
    assert (release.inputs["chart"], release.inputs["version"]) == (VOLCANO.chart, "1.15.1")
    assert release.inputs["repositoryOpts"] == {"repo": "https://volcano-sh.github.io/helm-charts"}
    assert release.inputs["namespace"] == "volcano-system" and release.inputs["createNamespace"] is True
    assert not release.inputs.get("skipAwait")
    assert release.urn in queue.dependencies
    assert queue.inputs["spec"] == volcano_queue(VolcanoArgs(queue="research"))["spec"]
    assert queue.provider == release.provider


def test_kueue_creates_flavors_then_cluster_queues_then_local_queues_after_its_release():
    args = KueueArgs(
        flavors=[ResourceFlavorArgs(name="default")],
        cluster_queues=[ClusterQueueArgs(name="shared", quotas={"default": {"cpu": "4"}})],
        local_queues=[LocalQueueArgs(name="team", namespace="ml", cluster_queue="shared")],
    )
    deployment = deploy_addon(lambda opts: Kueue("queues", args, opts=opts))

    release = deployment.one(RELEASE)
    flavor = deployment.one("kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor")
    shared = deployment.one("kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue")
    team = deployment.one("kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue")
    assert (release.inputs["chart"], release.inputs["version"]) == (
        "oci://registry.k8s.io/kueue/charts/kueue",
        "0.19.2",
    )
    assert "repositoryOpts" not in release.inputs
    assert release.urn in flavor.dependencies
    assert {release.urn, flavor.urn} <= set(shared.dependencies)
    assert {release.urn, shared.urn} <= set(team.dependencies)
    assert team.inputs["metadata"]["namespace"] == "ml"


def test_pinned_charts_are_exact_versions():
    for chart in (NVIDIA_DEVICE_PLUGIN, VOLCANO, KUEUE):
        assert chart.version.replace(".", "").isdigit()


def transformed(transforms, type_, props):
    args = pulumi.ResourceTransformArgs(
        custom=True, type_=type_, name="x", props=props, opts=pulumi.ResourceOptions()
    )
    results = [t(args) for t in transforms]
    return [r for r in results if r is not None]


OPERATOR = {
    "metadata": {"name": "training-operator", "namespace": "kubeflow"},
    "spec": {"template": {"spec": {"containers": [{"name": "training-operator", "command": ["/manager"]}]}}},
}


def test_training_operator_applies_the_pinned_standalone_overlay():
    deployment = deploy_addon(lambda opts: TrainingOperator("kfto", opts=opts))

    manifests = deployment.one("kubernetes:kustomize/v2:Directory")
    assert manifests.remote and manifests.parent == deployment.one("trainplane:addons:TrainingOperator").urn
    assert manifests.inputs["directory"] == (
        "https://github.com/kubeflow/trainer//manifests/overlays/standalone?ref=v1.9.4"
    )


@pytest.mark.parametrize(
    ("type_", "name", "ignored"),
    [
        ("kubernetes:core/v1:Secret", "training-operator-webhook-cert", ["data", "stringData"]),
        (
            "kubernetes:admissionregistration.k8s.io/v1:ValidatingWebhookConfiguration",
            "validator.training-operator.kubeflow.org",
            ["webhooks[*].clientConfig.caBundle"],
        ),
    ],
)
def test_training_operator_ignores_the_webhook_cert_it_writes_itself(type_, name, ignored):
    deployment = deploy_addon(lambda opts: TrainingOperator("kfto", opts=opts))
    transforms = deployment.one("kubernetes:kustomize/v2:Directory").transforms

    (result,) = transformed(transforms, type_, {"metadata": {"name": name}})
    assert result.opts.ignore_changes == ignored
    assert transformed(transforms, type_, {"metadata": {"name": "other"}}) == []


def test_training_operator_gang_scheduler_flag_follows_the_installed_scheduler():
    with_volcano = deploy_addon(
        lambda opts: TrainingOperator("kfto", TrainingOperatorArgs(gang_scheduler_name="volcano"), opts=opts)
    )
    without = deploy_addon(lambda opts: TrainingOperator("kfto", opts=opts))
    deployment_type = "kubernetes:apps/v1:Deployment"

    (result,) = transformed(
        with_volcano.one("kubernetes:kustomize/v2:Directory").transforms, deployment_type, OPERATOR
    )
    (container,) = result.props["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["--gang-scheduler-name=volcano"]
    assert (
        transformed(without.one("kubernetes:kustomize/v2:Directory").transforms, deployment_type, OPERATOR)
        == []
    )


def test_gang_scheduler_flag_replaces_an_earlier_value_and_leaves_the_input_alone():
    deployment = with_gang_scheduler(OPERATOR, "scheduler-plugins-scheduler")
    again = with_gang_scheduler(deployment, "volcano")

    assert again["spec"]["template"]["spec"]["containers"][0]["args"] == ["--gang-scheduler-name=volcano"]
    assert "args" not in OPERATOR["spec"]["template"]["spec"]["containers"][0]
