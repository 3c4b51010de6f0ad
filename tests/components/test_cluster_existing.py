"""ExistingCluster: kubeconfig from a path or content, context checks, provider and secret output."""

from __future__ import annotations

import pytest

from components.cluster import ExistingCluster, ExistingClusterArgs
from components.cluster.existing import CONTENT_PLACEHOLDER, load_kubeconfig
from components.errors import ArgumentError
from tests.components.componenttest import KUBECONFIG, deploy

pytestmark = pytest.mark.unit


@pytest.fixture
def kubeconfig_file(tmp_path):
    path = tmp_path / "config"
    path.write_text(KUBECONFIG)
    return path


def test_kubeconfig_is_read_from_a_path_or_taken_as_content(kubeconfig_file):
    assert load_kubeconfig(ExistingClusterArgs(kubeconfig=str(kubeconfig_file))) == KUBECONFIG
    assert load_kubeconfig(ExistingClusterArgs(kubeconfig=KUBECONFIG, context="test")) == KUBECONFIG


def test_default_kubeconfig_is_the_kubectl_one(tmp_path, monkeypatch):
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text(KUBECONFIG)
    monkeypatch.setenv("HOME", str(tmp_path))

    assert load_kubeconfig(ExistingClusterArgs()) == KUBECONFIG


@pytest.mark.parametrize(
    ("args", "field", "message"),
    [
        (
            ExistingClusterArgs(kubeconfig="/nonexistent/kubeconfig"),
            "kubeconfig",
            "no file at /nonexistent/kubeconfig",
        ),
        (
            ExistingClusterArgs(kubeconfig=KUBECONFIG, context="prod"),
            "context",
            "names no defined kubeconfig context; use one of test",
        ),
        (ExistingClusterArgs(kubeconfig="a: [\nb"), "kubeconfig", "not valid YAML"),
        (ExistingClusterArgs(kubeconfig="kind: Config\nusers: []\n"), "kubeconfig", "has no 'contexts' list"),
    ],
)
def test_unusable_kubeconfig_fails_naming_field_and_fix(args, field, message):
    with pytest.raises(ArgumentError, match=message) as caught:
        load_kubeconfig(args)
    assert caught.value.field == field


def test_kubeconfig_content_never_appears_in_errors():
    with pytest.raises(ArgumentError) as caught:
        load_kubeconfig(ExistingClusterArgs(kubeconfig="kind: Config\nusers: [{user: {token: s3cret}}]\n"))
    assert "s3cret" not in str(caught.value)
    assert caught.value.value == CONTENT_PLACEHOLDER


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"kubeconfig": ""}, "kubeconfig"), ({"context": " "}, "context"), ({"gpu_nodes": "yes"}, "gpu_nodes")],
)
def test_existing_args_reject_blank_values(kwargs, field):
    with pytest.raises(ArgumentError) as caught:
        ExistingClusterArgs(**kwargs)
    assert caught.value.field == field


def test_existing_cluster_is_a_provider_bound_to_kubeconfig_and_context(kubeconfig_file):
    def program():
        cluster = ExistingCluster("lab", ExistingClusterArgs(kubeconfig=str(kubeconfig_file), context="test"))
        return {"kubeconfig": cluster.kubeconfig, "gpu": cluster.gpu_nodes}

    deployment = deploy(program)

    component = deployment.one("trainplane:cluster:ExistingCluster")
    provider = deployment.one("pulumi:providers:kubernetes")
    assert provider.parent == component.urn
    assert provider.name == "lab-provider"
    assert provider.inputs["context"] == "test"
    assert deployment.outputs == {"kubeconfig": KUBECONFIG, "gpu": False}
    assert "kubeconfig" in deployment.secret_outputs
