"""The add-ons installed from a local copy of what they pin (a cluster behind a firewall): a Helm add-on's chart
directory or archive, the training operator's kustomize overlay, from a component's arguments or a stack's
``trainplane:addonCopies``; a copy of another release is refused at preview."""

from __future__ import annotations

import json
import re
import tarfile

import pytest
import yaml

from components.addons import (
    Kueue,
    KueueArgs,
    NvidiaDevicePlugin,
    NvidiaDevicePluginArgs,
    TrainerV2,
    TrainerV2Args,
    TrainingOperator,
    TrainingOperatorArgs,
    Volcano,
    VolcanoArgs,
)
from components.addons.kueue import PYTORCHJOB_FRAMEWORK
from components.addons.versions import KUEUE, NVIDIA_DEVICE_PLUGIN, TRAINER, VOLCANO
from components.errors import ArgumentError
from testbed.cluster.project import addon_stack
from tests.components.componenttest import run_program
from tests.components.stackconfigtest import assert_refused, parse
from tests.components.test_addons_components import RELEASE, deploy_addon

pytestmark = pytest.mark.unit


def write_chart(directory, name, version):
    """A chart directory as ``helm pull --untar`` leaves it (``Chart.yaml`` is all the add-ons read)."""
    directory.mkdir(parents=True)
    (directory / "Chart.yaml").write_text(yaml.safe_dump({"apiVersion": "v2", "name": name, "version": version}))
    return directory


def write_archive(directory, name, version):
    """A chart archive as ``helm package`` writes it: ``<name>/Chart.yaml`` inside a ``.tgz``."""
    chart = write_chart(directory / "src" / name, name, version)
    archive = directory / f"{name}-{version}.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(chart, arcname=name)
    return archive


HELM_ADDONS = {
    "Kueue": (Kueue, KueueArgs, KUEUE),
    "Volcano": (Volcano, VolcanoArgs, VOLCANO),
    "NvidiaDevicePlugin": (NvidiaDevicePlugin, NvidiaDevicePluginArgs, NVIDIA_DEVICE_PLUGIN),
    "TrainerV2": (TrainerV2, TrainerV2Args, TRAINER),
}


@pytest.mark.parametrize("form", ["directory", "archive"])
@pytest.mark.parametrize("name", HELM_ADDONS)
def test_a_helm_addon_installs_a_local_copy_of_its_pinned_chart(tmp_path, name, form):
    """The release takes the path as its chart, with no version and no repository (Helm reads a chart directory
    or archive as it is); the values are the ones the add-on renders for the repository's chart."""
    component, args_type, chart = HELM_ADDONS[name]
    write = write_chart if form == "directory" else write_archive
    path = str(write(tmp_path / chart.name if form == "directory" else tmp_path, chart.name, chart.version))
    remote = deploy_addon(lambda opts: component("addon", args_type(), opts=opts)).one(RELEASE)
    local = deploy_addon(lambda opts: component("addon", args_type(chart_path=path), opts=opts)).one(RELEASE)

    assert local.inputs["chart"] == path
    assert "version" not in local.inputs and "repositoryOpts" not in local.inputs
    assert local.inputs["values"] == remote.inputs["values"]
    assert (remote.inputs["chart"], remote.inputs["version"]) == (chart.chart, chart.version)


@pytest.mark.parametrize("name", HELM_ADDONS)
def test_a_local_chart_of_another_release_or_none_is_refused_naming_the_pin(tmp_path, name):
    _, args_type, chart = HELM_ADDONS[name]
    other = write_chart(tmp_path / "other", chart.name, "0.0.1")
    for path, says in ((other, f"holds the {chart.name} chart, version 0.0.1"), (tmp_path / "missing",
                                                                                  "holds no Chart.yaml")):
        with pytest.raises(ArgumentError) as info:
            args_type(chart_path=str(path))
        assert info.value.field == "chart_path"
        assert info.value.problem == says and f"the {chart.name} chart, version {chart.version}" in info.value.fix


def write_overlay(directory, tag):
    """The standalone overlay's kustomization as kubeflow/trainer v1.9.4 has it, with the operator image at ``tag``."""
    directory.mkdir(parents=True)
    (directory / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "namespace": "kubeflow",
        "resources": ["../../base", "namespace.yaml"],
        "images": [{"name": "ghcr.io/kubeflow/training-v1/training-operator", "newTag": tag}],
    }))
    return str(directory)


def test_the_training_operator_applies_a_local_copy_of_its_pinned_overlay(tmp_path):
    """kubeflow/trainer v1.9.4 ``manifests/overlays/standalone/kustomization.yaml`` sets the operator image to
    ``v1-93c5489``: a local copy of that overlay is applied in place of the remote target."""
    path = write_overlay(tmp_path / "manifests" / "overlays" / "standalone", "v1-93c5489")
    deployment = deploy_addon(lambda opts: TrainingOperator("kfto", TrainingOperatorArgs(manifests_path=path),
                                                            opts=opts))

    assert deployment.one("kubernetes:kustomize/v2:Directory").inputs["directory"] == path


@pytest.mark.parametrize(("tag", "says"), [("v1-855e096", "not v1-93c5489"), (None, "holds no kustomization")])
def test_a_local_overlay_of_another_release_or_none_is_refused(tmp_path, tag, says):
    path = write_overlay(tmp_path / "overlay", tag) if tag else str(tmp_path / "missing")
    with pytest.raises(ArgumentError) as info:
        TrainingOperatorArgs(manifests_path=path)
    assert info.value.field == "manifests_path"
    assert says in info.value.problem and "v1.9.4" in info.value.fix


@pytest.mark.usefixtures("home")
def test_a_stack_installs_each_addon_from_the_local_copy_addon_copies_names(tmp_path):
    """``trainplane:addonCopies`` maps an add-on's name to its copy: a chart for the Helm add-ons, the overlay for the
    training operator; the add-ons it does not name keep their repositories."""
    kueue = str(write_chart(tmp_path / "kueue", KUEUE.name, KUEUE.version))
    overlay = write_overlay(tmp_path / "standalone", "v1-93c5489")
    config = parse("existing", addons=["training-operator", "kueue", "device-plugin"],
                   addonCopies={"kueue": kueue, "training-operator": overlay})

    assert config.addons.kueue.chart_path == kueue
    assert config.addons.training_operator.manifests_path == overlay
    assert config.addons.device_plugin.chart_path is None
    assert PYTORCHJOB_FRAMEWORK in config.addons.kueue.frameworks, "the stack's own settings are kept"


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize(("copies", "value", "fix"), [
    ({"volcano": "charts/volcano"}, "'charts/volcano'", "add volcano to trainplane:addons or remove this entry"),
    ({"kueue": "missing"}, "'missing'", f"the kueue chart, version {KUEUE.version}"),
])
def test_a_stack_copy_for_an_addon_it_lacks_or_of_another_chart_is_refused(copies, value, fix):
    name = next(iter(copies))
    assert_refused("existing", {"addonCopies": copies}, f"trainplane:addonCopies.{name}", value, re.escape(fix))


def test_the_program_installs_a_stacks_addons_from_their_copies_with_no_job(home, tmp_path):
    """The repository's program with the test cluster's add-on stack (``testbed.cluster.project.addon_stack``:
    the stack's add-ons from local copies, no queue, no job) registers the Kueue release from the chart directory
    and the operator's overlay from the copy, and nothing from a repository."""
    kueue = str(write_chart(tmp_path / "kueue", KUEUE.name, KUEUE.version))
    overlay = write_overlay(tmp_path / "standalone", "v1-93c5489")
    stack = addon_stack("existing", home / ".kube" / "config", {"kueue": kueue, "training-operator": overlay})
    deployment = run_program({k: v if isinstance(v, str) else json.dumps(v) for k, v in stack.config.items()})

    assert deployment.one(RELEASE).inputs["chart"] == kueue
    assert deployment.one("kubernetes:kustomize/v2:Directory").inputs["directory"] == overlay
    assert not [r for r in deployment.registrations.values() if r.type.startswith("kubernetes:batch")]
