"""The ``TrainerV2`` add-on under mocks: the pinned Trainer chart with JobSet, its local-chart option, and
trainplane's ClusterTrainingRuntimes registered after the release, one per gang scheduler."""

from __future__ import annotations

from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s
import pytest

from components.addons import TrainerV2, TrainerV2Args
from components.addons.trainer_runtime import cluster_training_runtime
from components.addons.versions import TRAINER
from components.errors import ArgumentError
from tests.components.componenttest import KUBECONFIG, deploy, run_program, stack_config
from tests.components.stackconfigtest import assert_refused, parse

pytestmark = pytest.mark.unit

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


def test_a_local_chart_replaces_the_registry_and_jobset_can_be_left_out(tmp_path: Path) -> None:
    """A chart directory or archive is installed as is (no version, no repository); ``jobset.install: false``
    skips the dependency (kubeflow/trainer v2.3.0 ``charts/kubeflow-trainer/values.yaml``)."""
    chart = tmp_path / "kubeflow-trainer"
    chart.mkdir()
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: kubeflow-trainer\nversion: 2.3.0\n")
    deployment = deploy_trainer(TrainerV2Args(chart_path=str(chart), install_jobset=False))
    release = deployment.one(RELEASE)
    assert release.inputs["chart"] == str(chart)
    assert "version" not in release.inputs and "repositoryOpts" not in release.inputs
    assert release.inputs["values"] == {"jobset": {"install": False}}


def test_one_runtime_per_gang_scheduler_each_after_the_release() -> None:
    """The runtimes wait for the release: the Trainer's validating webhook for them must be up
    (kubeflow/trainer v2.3.0 ``pkg/webhooks/trainingruntime_webhook.go``)."""
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


TRAINJOB = {"name": "digits", "image": "trainplane-examples:dev", "script": "/app/examples/ddp_digits.py",
            "workers": 2, "numProc": 2, "backend": "trainjob", "gangScheduler": "volcano", "queue": "trainplane"}


@pytest.mark.usefixtures("home")
def test_a_stack_with_the_trainer_gets_a_runtime_per_gang_scheduler_it_installs_and_runs_trainjobs() -> None:
    config = parse("local", addons=["volcano", "trainer"], jobs=[TRAINJOB])
    assert config.addons.trainer == TrainerV2Args(gang_schedulers=("none", "volcano"))
    assert config.capabilities.trainer_runtimes == ("none", "volcano")
    assert parse("local", addons=["trainer"], jobs=[{**TRAINJOB, "gangScheduler": "none", "queue": None}]
                 ).capabilities.trainer_runtimes == ("none",)


@pytest.mark.usefixtures("home")
def test_a_stack_without_the_trainer_refuses_its_trainjobs() -> None:
    assert_refused("local", {"addons": ["volcano"], "jobs": [TRAINJOB]}, "trainplane:jobs[0].backend", "'trainjob'",
                   "Kubeflow Trainer v2 is not installed on the cluster; install the TrainerV2 add-on")


@pytest.mark.usefixtures("home")
def test_the_stack_program_installs_the_trainer_after_volcano_and_the_trainjob_waits_for_both() -> None:
    deployment = run_program(stack_config("local", addons=["volcano", "trainer"], jobs=[TRAINJOB]))
    trainer = deployment.one("trainplane:index:TrainerV2")
    volcano_release = deployment.named("trainplane-volcano-release")
    assert volcano_release.urn in trainer.dependencies, "the Trainer starts once Volcano's PodGroup CRD exists"
    trainjob = deployment.one("kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob")
    runtimes_of_trainer = [r.urn for r in deployment.descendants(trainer)]
    assert set(runtimes_of_trainer) <= set(trainjob.dependencies) and volcano_release.urn in trainjob.dependencies
    assert trainjob.inputs["spec"]["runtimeRef"]["name"] == "trainplane-volcano"
    runtimes = {r.inputs["metadata"]["name"] for r in deployment.of_type(RUNTIME_TYPE)}
    assert runtimes == {"trainplane", "trainplane-volcano"}
