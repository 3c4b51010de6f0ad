"""KindCluster: the generated kind config, the kind CLI commands, the kubeconfig and the provider."""

from __future__ import annotations

import jsonschema
import pytest
import yaml

from components.cluster import KindCluster, KindClusterArgs
from components.cluster.kind import kind_config
from components.errors import ArgumentError
from tests.components.componenttest import KUBECONFIG, Mocks, RecordingMonitor, deploy
from tests.components.schemacheck import KIND_CLUSTER_SCHEMA

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("args", "roles", "image"),
    [
        (KindClusterArgs(), ["control-plane", "worker", "worker"], None),
        (KindClusterArgs(workers=0), ["control-plane"], None),
        (
            KindClusterArgs(workers=3, node_image="kindest/node:v1.34.0"),
            ["control-plane"] + ["worker"] * 3,
            "kindest/node:v1.34.0",
        ),
    ],
)
def test_kind_config_is_a_valid_kind_cluster_with_the_requested_nodes(args, roles, image):
    config = kind_config(args)

    jsonschema.validate(config, KIND_CLUSTER_SCHEMA)
    assert [node["role"] for node in config["nodes"]] == roles
    assert {node.get("image") for node in config["nodes"]} == {image}
    assert config["name"] == args.cluster_name


def test_kind_config_round_trips_through_yaml_without_aliases():
    text = yaml.safe_dump(kind_config(KindClusterArgs(workers=2, node_image="kindest/node:v1.34.0")))

    assert "&id" not in text
    jsonschema.validate(yaml.safe_load(text), KIND_CLUSTER_SCHEMA)


def test_kind_cluster_runs_the_kind_cli_and_reads_back_a_secret_kubeconfig():
    def program():
        cluster = KindCluster("dev", KindClusterArgs(cluster_name="lab", workers=1, load_images=["img:dev"]))
        return {"kubeconfig": cluster.kubeconfig}

    deployment = deploy(program)

    component = deployment.one("trainplane:cluster:KindCluster")
    create = deployment.named("dev-create")
    read = deployment.named("dev-kubeconfig")
    load = deployment.named("dev-load-0")
    provider = deployment.one("pulumi:providers:kubernetes")
    assert {r.parent for r in (create, read, load, provider)} == {component.urn}
    assert create.inputs["create"] == "kind create cluster --name lab --config=- --wait 180s"
    assert create.inputs["delete"] == "kind delete cluster --name lab"
    expected = kind_config(KindClusterArgs(cluster_name="lab", workers=1))
    assert yaml.safe_load(create.inputs["stdin"]) == expected
    assert read.inputs["create"] == "kind get kubeconfig --name lab"
    assert read.inputs["logging"] == "none"
    assert create.urn in read.dependencies
    assert load.inputs["create"] == "kind load docker-image img:dev --name lab"
    assert create.urn in load.dependencies
    assert read.urn in provider.dependencies
    assert deployment.outputs["kubeconfig"] == KUBECONFIG
    assert "kubeconfig" in deployment.secret_outputs


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"cluster_name": "Trainplane"}, "cluster_name"),
        ({"cluster_name": "a" * 64}, "cluster_name"),
        ({"workers": -1}, "workers"),
        ({"workers": True}, "workers"),
        ({"node_image": " "}, "node_image"),
        ({"load_images": "img:dev"}, "load_images"),
    ],
)
def test_kind_args_reject_bad_values_naming_the_field(kwargs, field):
    with pytest.raises(ArgumentError, match=rf"^{field}=") as caught:
        KindClusterArgs(**kwargs)
    assert caught.value.field == field


def test_a_rebuilt_image_is_loaded_again_on_the_next_up():
    """pulumi/pulumi-command ``local.Command`` runs ``create`` again only when it is replaced, i.e. when a
    ``trigger`` changes. The image's ID (``docker image inspect``, read through ``local.run`` on every
    preview and update) is one of them, so rebuilding ``trainplane-examples:dev`` under the same name
    re-runs ``kind load docker-image``; the image name and the cluster alone would not."""
    args = KindClusterArgs(cluster_name="lab", load_images=["img:dev"])
    inspect = "docker image inspect --format '{{.Id}}' img:dev"

    def loads(image_id):
        monitor = RecordingMonitor(Mocks(command_stdout={inspect: image_id}))
        deploy(lambda: {"kubeconfig": KindCluster("dev", args).kubeconfig}, monitor=monitor)
        assert monitor.mocks.commands_run == [inspect]
        return next(r for r in monitor.registrations.values() if r.name == "dev-load-0")

    before, after = loads("sha256:aaa"), loads("sha256:bbb")
    assert "sha256:aaa" in before.inputs["triggers"] and "sha256:bbb" in after.inputs["triggers"]
    assert before.inputs["triggers"] != after.inputs["triggers"]
