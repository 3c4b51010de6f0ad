"""The ``TrainerV2`` add-on under mocks: the pinned Trainer chart with JobSet, its local-chart option, and
trainplane's ClusterTrainingRuntimes registered after the release, one per gang scheduler."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s
import pytest

from components.addons import TrainerV2, TrainerV2Args
from components.addons.trainer_runtime import cluster_training_runtime
from components.addons.versions import TRAINER
from components.errors import ArgumentError
from tests.components.componenttest import KUBECONFIG, deploy

RELEASE = "kubernetes:helm.sh/v3:Release"
RUNTIME_TYPE = "kubernetes:trainer.kubeflow.org/v1alpha1:ClusterTrainingRuntime"


def deploy_trainer(args: TrainerV2Args | None = None):
    def program():
        provider = k8s.Provider("k8s", kubeconfig=KUBECONFIG)
        trainer = TrainerV2("trainer", args, opts=pulumi.ResourceOptions(provider=provider))
        return {"runtimes": trainer.runtimes, "namespace": trainer.namespace}

    return deploy(program)


def test_the_release_is_the_pinned_chart_with_jobset_and_waits_for_the_trainer() -> None:
    """kubeflow/trainer v2.3.0 ``charts/kubeflow-trainer/Chart.yaml`` (version 2.3.0, ``jobset`` 0.12.0 as a
    dependency under ``jobset.install``), published as ``oci://ghcr.io/kubeflow/charts/kubeflow-trainer``
    (the chart's README); ``kubeflow-system`` is the namespace the README installs into."""
    deployment = deploy_trainer()
    release = deployment.one(RELEASE)
    assert (release.inputs["chart"], release.inputs["version"]) == (TRAINER.chart, "2.3.0")
    assert TRAINER.chart == "oci://ghcr.io/kubeflow/charts/kubeflow-trainer" and "repositoryOpts" not in release.inputs
    assert release.inputs["namespace"] == "kubeflow-system" and release.inputs["createNamespace"] is True
    assert release.inputs["values"] == {"jobset": {"install": True}}
    assert not release.inputs.get("skipAwait"), "the runtimes need the Trainer's webhook up"
    assert deployment.outputs == {"runtimes": ["trainplane"], "namespace": "kubeflow-system"}


def test_a_local_chart_replaces_the_registry_and_jobset_can_be_left_out() -> None:
    deployment = deploy_trainer(TrainerV2Args(chart_path="/charts/kubeflow-trainer", install_jobset=False))
    release = deployment.one(RELEASE)
    assert release.inputs["chart"] == "/charts/kubeflow-trainer"
    assert "version" not in release.inputs and "repositoryOpts" not in release.inputs
    assert release.inputs["values"] == {"jobset": {"install": False}}


def test_one_runtime_per_gang_scheduler_each_after_the_release() -> None:
    deployment = deploy_trainer(TrainerV2Args(gang_schedulers=["none", "volcano", "scheduler-plugins"]))
    release = deployment.one(RELEASE)
    runtimes = {r.inputs["metadata"]["name"]: r for r in deployment.of_type(RUNTIME_TYPE)}
    assert sorted(runtimes) == ["trainplane", "trainplane-coscheduling", "trainplane-volcano"]
    assert all(release.urn in r.dependencies for r in runtimes.values())
    labels = {"app.kubernetes.io/part-of": "trainplane", "app.kubernetes.io/managed-by": "pulumi"}
    assert runtimes["trainplane-volcano"].inputs["spec"] == cluster_training_runtime("volcano", labels)["spec"]
    assert deployment.outputs["runtimes"] == ["trainplane", "trainplane-volcano", "trainplane-coscheduling"]


@pytest.mark.parametrize(("args", "field"), [
    ({"gang_schedulers": ["kueue"]}, "gang_schedulers"),
    ({"gang_schedulers": ["none", "none"]}, "gang_schedulers"),
    ({"chart_path": " "}, "chart_path"),
    ({"namespace": "Kubeflow"}, "namespace"),
])
def test_bad_arguments_name_the_field(args: dict, field: str) -> None:
    with pytest.raises(ArgumentError) as raised:
        TrainerV2Args(**args)
    assert raised.value.field == field
