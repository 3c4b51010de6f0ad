"""The ``trainplane`` plugin, driven as the engine drives it: its manifest, the schema it serves, and the
components it constructs from another language's inputs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
import yaml
from google.protobuf import json_format
from pulumi.runtime.rpc import UNKNOWN

from components.job.args import DistributedJobArgs
from components.job.bundle import build_bundle
from components.job.component import RESOURCE_TYPE
from components.job.render import render_job
from tests.components import fake_engine
from tests.components.componenttest import REPO_ROOT, is_secret, unsecret
from tests.components.fake_engine import FakeEngine

pytestmark = pytest.mark.process


def test_the_plugin_manifest_names_the_python_runtime_only() -> None:
    """The Python language host runs plugins with the pip toolchain in a ``venv`` only
    (pulumi/pulumi ``sdk/python/lib/pulumi/provider/experimental/ComponentProvider.md``)."""
    manifest = yaml.safe_load((REPO_ROOT / "provider" / "PulumiPlugin.yaml").read_text())
    assert manifest == {"runtime": "python"}
    requirements = (REPO_ROOT / "provider" / "requirements.txt").read_text().split()
    assert "-r" in requirements and "../requirements.txt" in requirements


PLUGIN_DIR = REPO_ROOT / "provider"
NAMESPACE_URN = f"urn:pulumi:{fake_engine.STACK}::{fake_engine.PROJECT}::kubernetes:core/v1:Namespace::research"
IMAGE = "registry.example/trainer:1"


@pytest.fixture(scope="module")
def engine() -> Iterator[FakeEngine]:
    with FakeEngine(PLUGIN_DIR) as running:
        yield running


def test_the_plugin_serves_the_schema_the_analyzer_infers(engine: FakeEngine, schema: dict[str, Any]) -> None:
    assert engine.schema() == schema


def children(engine: FakeEngine, component_urn: str) -> dict[str, fake_engine.Registered]:
    return {r.name: r for r in engine.monitor.registered if r.parent == component_urn}


def test_a_program_in_another_language_gets_the_job_python_renders(engine: FakeEngine) -> None:
    """The inputs as a TypeScript or YAML program sends them: camelCase, numbers as floats, the namespace
    from a Namespace resource (so it arrives as an Output)."""
    inputs = {"image": IMAGE, "script": "train.py", "workers": 2, "numProc": 2, "gpus": 1, "cpus": 4,
              "namespace": "research", "env": {"DB_URL": "postgres://db:5432/runs"}, "gangScheduler": "volcano",
              "queue": "research", "nodeSelector": {"pool": "a100"}}
    response = engine.construct(RESOURCE_TYPE, "train", inputs, dependencies={"namespace": [NAMESPACE_URN]})
    state = json_format.MessageToDict(response.state)
    assert {k: state[k] for k in ("jobName", "namespace", "serviceFqdn", "coordinatorUrl")} == {
        "jobName": "train", "namespace": "research", "serviceFqdn": "train.research.svc.cluster.local",
        "coordinatorUrl": "http://train-0.train.research.svc.cluster.local:32300"}
    assert unsecret(state["token"]) == fake_engine.PASSWORD and is_secret(state["token"])
    assert response.urn.endswith("$trainplane:index:DistributedJob::train"), "named after the job (Output namespace)"
    expected = render_job("train", DistributedJobArgs(
        image=IMAGE, script="train.py", workers=2, num_proc=2, gpus=1, cpus=4.0, namespace="research",
        env={"DB_URL": "postgres://db:5432/runs"}, gang_scheduler="volcano", queue="research",
        node_selector={"pool": "a100"}), fake_engine.PASSWORD, build_bundle())
    made = children(engine, response.urn)
    for manifest in expected.manifests:
        child = made[f"train-{manifest.role}"]
        assert unsecret(child.inputs) == manifest.body, f"{manifest.role} differs from the Python render"
        assert NAMESPACE_URN in child.dependencies, f"{manifest.role} does not wait for the namespace"


def test_a_value_unknown_at_preview_previews_the_job_with_it_unknown(engine: FakeEngine) -> None:
    inputs = {"image": UNKNOWN, "mode": "service", "workers": 2, "namespace": "research"}
    response = engine.construct(RESOURCE_TYPE, "serve", inputs, dependencies={"image": [NAMESPACE_URN]},
                                dry_run=True)
    workload = children(engine, response.urn)["research/serve-statefulset"]
    assert workload.inputs["spec"]["template"]["spec"]["containers"][0]["image"] == UNKNOWN


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({"image": IMAGE, "script": "train.py", "namespace": "Team-A"},
         "namespace='Team-A': not a valid name; use lower-case letters"),
        ({"image": IMAGE, "script": "train.py", "workers": 2.5}, "workers=2.5: must be a whole number"),
        ({"image": IMAGE, "mode": "service", "args": ["--x"]}, "args=('--x',): service mode runs no entrypoint"),
    ],
)
def test_an_invalid_input_fails_the_construct_naming_the_field(
    engine: FakeEngine, inputs: dict[str, Any], message: str
) -> None:
    before = len(engine.monitor.registered)
    with pytest.raises(grpc.RpcError) as info:
        engine.construct(RESOURCE_TYPE, "bad", inputs, dependencies={"namespace": [NAMESPACE_URN]})
    assert message in info.value.details()
    made = [r.type for r in engine.monitor.registered[before:]]
    assert set(made) <= {RESOURCE_TYPE}, f"children were registered: {made}"


def test_an_addon_with_nested_objects_constructs_from_another_languages_inputs(engine: FakeEngine) -> None:
    """Nested objects arrive camelCased; the component provider maps them to Python names by the schema
    types (pulumi 3.272.0 ``component.py``, ``map_input_properties``)."""
    inputs = {"flavors": [{"name": "a100", "nodeLabels": {"pool": "a100"}}],
              "clusterQueues": [{"name": "gpu", "quotas": {"a100": {"cpu": 64, "nvidia.com/gpu": "8"}}}],
              "localQueues": [{"name": "team", "namespace": "research", "clusterQueue": "gpu"}],
              "podsReadyTimeout": 300}
    response = engine.construct("trainplane:index:Kueue", "kueue", inputs)
    state = json_format.MessageToDict(response.state)
    assert (state["namespace"], state["clusterQueues"]) == ("kueue-system", ["gpu"])
    made = {r.name: r for r in engine.monitor.registered if r.parent == response.urn}
    assert made["kueue-localqueue-research-team"].inputs["spec"] == {"clusterQueue": "gpu"}
    flavors = made["kueue-clusterqueue-gpu"].inputs["spec"]["resourceGroups"][0]["flavors"]
    assert flavors == [{"name": "a100", "resources": [{"name": "cpu", "nominalQuota": 64},
                                                      {"name": "nvidia.com/gpu", "nominalQuota": "8"}]}]
    assert made["kueue-flavor-a100"].inputs["spec"] == {"nodeLabels": {"pool": "a100"}}
