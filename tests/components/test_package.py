"""The ``trainplane`` package schema, as the Python SDK's component analyzer infers it from the real components.

Upstream rules encoded here (no Pulumi CLI runs here):
- The schema must satisfy Pulumi's package metaschema (pulumi/pulumi ``pkg/codegen/schema/pulumi.json``,
  the copy in ``shared/schemas``; its README gives the one regex spelling Python needs).
- The analyzer (pulumi 3.272.0 ``pulumi/provider/experimental/analyzer.py``) takes a component's inputs from
  the TypedDict annotating its ``__init__``'s ``args``, camel-cases their names, marks a property ``plain``
  unless it is a ``pulumi.Input``, lists a property as required unless it is ``NotRequired``/``Optional``, and
  takes descriptions from the docstring under each annotation; outputs are the class's ``Output`` attributes.
- The component provider resolves a construct request's type ``<package>:index:<class name>``
  (``component.py``, ``validate_resource_type``), so the component's own type token must be that.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import inspect
import json
import re
import typing
from collections.abc import Iterator
from typing import Any

import grpc
import jsonschema
import pulumi
import pytest
import yaml
from google.protobuf import json_format
from pulumi.runtime.rpc import UNKNOWN

from components import package, typeddicts
from components.addons import (
    ClusterQueueArgs,
    Kueue,
    KueueArgs,
    LocalQueueArgs,
    NvidiaDevicePlugin,
    NvidiaDevicePluginArgs,
    ResourceFlavorArgs,
    TrainingOperator,
    TrainingOperatorArgs,
    Volcano,
    VolcanoArgs,
)
from components.addons.inputs import ClusterQueue, LocalQueue, ResourceFlavor
from components.docs import attribute_docs
from components.job.args import FIELD_DOCS, INPUT_FIELDS, DistributedJobArgs
from components.job.bundle import build_bundle
from components.job.component import RESOURCE_TYPE, DistributedJob
from components.job.render import render_job
from tests.components import fake_engine
from tests.components.componenttest import REPO_ROOT, SCHEMAS, is_secret, unsecret
from tests.components.fake_engine import FakeEngine

METASCHEMA = SCHEMAS / "pulumi-package-metaschema.json"
YAML_PROGRAM = REPO_ROOT / "examples" / "yaml" / "Pulumi.yaml"
SCALARS = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}
OUTPUTS = {"job_name", "namespace", "service_fqdn", "coordinator_url", "token"}


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return package.schema()


@pytest.fixture(scope="module")
def job(schema: dict[str, Any]) -> dict[str, Any]:
    return schema["resources"][RESOURCE_TYPE]


def metaschema_validator() -> jsonschema.Draft202012Validator:
    """The metaschema with its ECMA-262 named groups ``(?<name>`` spelled as Python's ``(?P<name>``."""
    text = METASCHEMA.read_text().replace("(?<", "(?P<")
    return jsonschema.Draft202012Validator(json.loads(text))


def test_the_inferred_schema_satisfies_pulumis_package_metaschema(schema: dict[str, Any]) -> None:
    errors = sorted(metaschema_validator().iter_errors(schema), key=lambda e: list(e.absolute_path))
    assert not errors, [f"{list(e.absolute_path)}: {e.message}" for e in errors]


def test_the_metaschema_check_is_not_vacuous() -> None:
    broken = {"name": "Trainplane!", "resources": {"trainplane:index:DistributedJob": {"isComponent": "yes"}}}
    assert len(list(metaschema_validator().iter_errors(broken))) >= 2


def test_the_package_hosts_the_components_under_their_own_type_tokens(schema: dict[str, Any]) -> None:
    assert (schema["name"], schema["namespace"]) == ("trainplane", "trainplane")
    assert RESOURCE_TYPE == "trainplane:index:DistributedJob"
    assert set(schema["resources"]) == {f"trainplane:index:{c.__name__}" for c in COMPONENT_ARGS}
    assert all(resource["isComponent"] is True for resource in schema["resources"].values())
    assert set(schema["types"]) == {f"trainplane:index:{t.__name__}" for t in NESTED.values()}


def test_the_package_version_is_the_projects(schema: dict[str, Any]) -> None:
    project = re.search(r'^version = "([^"]+)"$', (REPO_ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    assert project is not None
    assert schema["version"] == package.VERSION == project.group(1)


COMPONENT_ARGS: dict[type, type] = {
    DistributedJob: DistributedJobArgs, NvidiaDevicePlugin: NvidiaDevicePluginArgs,
    TrainingOperator: TrainingOperatorArgs, Volcano: VolcanoArgs, Kueue: KueueArgs,
}
"""Every packaged component and the args dataclass its Python callers pass."""
NESTED: dict[type, type] = {ResourceFlavorArgs: ResourceFlavor, ClusterQueueArgs: ClusterQueue,
                            LocalQueueArgs: LocalQueue}
"""Args dataclasses nested in others, and the TypedDict (a schema type) each is documented and declared by."""
INPUTS: dict[type, frozenset[str]] = {DistributedJob: INPUT_FIELDS}
"""The fields that take a ``pulumi.Input``, per component; the add-ons take none."""


def documented_by(args: type) -> type:
    """The TypedDict declaring the fields of args dataclass ``args`` (what the analyzer reads)."""
    if args in NESTED:
        return NESTED[args]
    (component,) = [c for c, a in COMPONENT_ARGS.items() if a is args]
    return inspect.get_annotations(component.__init__)["args"]


def schema_type(hint: Any) -> dict[str, Any]:
    """The schema type a Python type hint of an args dataclass stands for."""
    members = [m for m in typing.get_args(hint) if m is not type(None)] if typing.get_origin(hint) is typing.Union \
        else [hint]
    plain = [m for m in members if typing.get_origin(m) is not collections.abc.Awaitable
             and typing.get_origin(m) is not pulumi.Output and not isinstance(m, typing.ForwardRef)]
    if len(plain) > 1 or plain == [Any]:  # the analyzer has no unions: an int or "auto", a quantity, is Any
        return {"$ref": "pulumi.json#/Any"}
    (kind,) = plain
    if kind in (str, int, float, bool):
        return {"type": SCALARS[kind.__name__]}
    if kind in NESTED:
        return {"$ref": f"#/types/trainplane:index:{NESTED[kind].__name__}"}
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is collections.abc.Sequence:
        return {"type": "array", "items": schema_type(args[0])}
    if origin is collections.abc.Mapping and args[0] is str:
        return {"type": "object", "additionalProperties": schema_type(args[1])}
    raise AssertionError(f"no schema type for {hint}")


def without_descriptions(prop: dict[str, Any]) -> dict[str, Any]:
    """A schema property's type alone: no description or plain marks, at any depth."""
    return {k: without_descriptions(v) if isinstance(v, dict) else v for k, v in prop.items()
            if k not in ("description", "plain")}


def fields_of(args: type) -> list[tuple[str, Any, bool]]:
    """(name, type hint, required) of each field of args dataclass ``args``."""
    hints = typing.get_type_hints(args, localns={"Output": pulumi.Output, "T": typing.TypeVar("T")})
    return [(f.name, hints[f.name], f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
            for f in dataclasses.fields(args)]


ARGUMENTS = [pytest.param(component, args, name, id=f"{component.__name__}.{name}")
             for component, args in COMPONENT_ARGS.items() for name, _, _ in fields_of(args)]
NESTED_FIELDS = [pytest.param(args, name, id=f"{typed.__name__}.{name}")
                 for args, typed in NESTED.items() for name, _, _ in fields_of(args)]


def field_docs(args: type) -> dict[str, str]:
    """Each field's documentation: the job's (shared settings from the job spec), else the docstrings."""
    return FIELD_DOCS if args is DistributedJobArgs else attribute_docs(args)


def normalized(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def assert_described(prop: dict[str, Any], args: type, field: str) -> None:
    """The schema's description is the field's documentation (:func:`field_docs`), plus its default when that
    is a scalar or an empty collection."""
    text = normalized(prop["description"])
    assert text.startswith(normalized(field_docs(args)[field]).rstrip(".")), f"{field}: {text}"
    spec = next(f for f in dataclasses.fields(args) if f.name == field)
    default = spec.default if spec.default is not dataclasses.MISSING else (
        spec.default_factory() if spec.default_factory is not dataclasses.MISSING else None)
    if isinstance(default, (str, int, float, bool)) or default in ((), {}):
        assert text.endswith(f"Default: ``{json.dumps(list(default) if default == () else default)}``."), text


@pytest.mark.parametrize(("component", "args", "field"), ARGUMENTS)
def test_every_argument_is_in_the_schema_with_its_type_requiredness_and_description(
    schema: dict[str, Any], component: type, args: type, field: str
) -> None:
    resource = schema["resources"][f"trainplane:index:{component.__name__}"]
    (hint, required) = next((h, r) for n, h, r in fields_of(args) if n == field)
    prop = resource["inputProperties"][camel(field)]
    assert without_descriptions(prop) == schema_type(hint)
    assert (camel(field) in resource["requiredInputs"]) is required
    inputs = INPUTS.get(component, frozenset())
    assert prop.get("plain") is (None if field in inputs else True), "Inputs are exactly the Input fields"
    assert_described(prop, args, field)


@pytest.mark.parametrize(("args", "field"), NESTED_FIELDS)
def test_every_field_of_a_nested_object_is_in_its_schema_type(schema: dict[str, Any], args: type, field: str) -> None:
    spec = schema["types"][f"trainplane:index:{NESTED[args].__name__}"]
    (hint, required) = next((h, r) for n, h, r in fields_of(args) if n == field)
    assert without_descriptions(spec["properties"][camel(field)]) == schema_type(hint)
    assert (camel(field) in spec.get("required", [])) is required
    assert_described(spec["properties"][camel(field)], args, field)


@pytest.mark.parametrize("args", [*COMPONENT_ARGS.values(), *NESTED])
def test_the_schema_has_no_argument_python_lacks(schema: dict[str, Any], args: type) -> None:
    typed = documented_by(args)
    assert list(typed.__annotations__) == [name for name, _, _ in fields_of(args)]


def test_the_fields_that_take_inputs_are_the_ones_checked_when_known() -> None:
    annotated = {f.name for f in dataclasses.fields(DistributedJobArgs) if "pulumi.Input[" in str(f.type)}
    assert annotated == INPUT_FIELDS


@pytest.mark.parametrize("module", typeddicts.modules(), ids=lambda m: m.path)
def test_the_generated_typed_dicts_are_current(module: typeddicts.Module) -> None:
    assert (REPO_ROOT / module.path).read_text() == typeddicts.render(module), \
        "run `python -m components.typeddicts` and commit the result"


@pytest.mark.parametrize(
    ("hint", "spelled"),
    [
        (pulumi.Input[str], "pulumi.Input[str]"),
        (typing.Optional[pulumi.Input[str]], "Optional[pulumi.Input[str]]"),
        (pulumi.Input[typing.Mapping[str, pulumi.Input[str]]], "pulumi.Input[Mapping[str, pulumi.Input[str]]]"),
        (typing.Union[int, str], "Any"),
        (typing.Optional[typing.Sequence[str]], "Optional[Sequence[str]]"),
        (typing.Sequence[ResourceFlavorArgs], "Sequence[ResourceFlavor]"),
        (typing.Mapping[str, typing.Mapping[str, typing.Union[int, str]]], "Mapping[str, Mapping[str, Any]]"),
    ],
)
def test_a_type_hint_is_spelled_as_the_analyzer_reads_it(hint: Any, spelled: str) -> None:
    assert typeddicts.annotation(hint, {ResourceFlavorArgs: "ResourceFlavor"}) == spelled


@pytest.mark.parametrize("args", [*COMPONENT_ARGS.values(), *NESTED])
def test_each_args_class_shows_each_fields_documentation(args: type) -> None:
    for name, doc in field_docs(args).items():
        assert f"{name}: {doc.splitlines()[0]}" in (args.__doc__ or ""), name


@pytest.mark.parametrize("component", COMPONENT_ARGS)
def test_each_components_outputs_are_in_the_schema_with_their_descriptions(
    schema: dict[str, Any], component: type
) -> None:
    resource = schema["resources"][f"trainplane:index:{component.__name__}"]
    docs = attribute_docs(component)
    assert set(resource["properties"]) == {camel(name) for name in docs}
    assert sorted(resource["required"]) == sorted(camel(name) for name in docs)
    for name, doc in docs.items():
        assert inspect.cleandoc(resource["properties"][camel(name)]["description"]) == doc
    assert "\n    " not in resource["description"], "the component's description is cleaned of indentation"


def test_the_jobs_outputs_are_strings(job: dict[str, Any]) -> None:
    assert {name: prop["type"] for name, prop in job["properties"].items()} == {camel(o): "string" for o in OUTPUTS}


# --- the YAML program in examples/ --------------------------------------------------------------------


REFERENCE = re.compile(r"\$\{([A-Za-z0-9_-]+)\.([A-Za-z0-9_.\[\]\"']+)\}")


def yaml_program() -> dict[str, Any]:
    return yaml.safe_load(YAML_PROGRAM.read_text())


def references(value: Any) -> list[tuple[str, str]]:
    """Every ``${resource.property}`` in ``value``, at any depth."""
    if isinstance(value, str):
        return [(m.group(1), re.split(r"[.\[]", m.group(2))[0]) for m in REFERENCE.finditer(value)]
    if isinstance(value, dict):
        return [r for v in value.values() for r in references(v)]
    if isinstance(value, list):
        return [r for v in value for r in references(v)]
    return []


def test_the_yaml_program_uses_the_package_by_path_and_its_tokens(schema: dict[str, Any]) -> None:
    """Pulumi YAML resolves a resource's ``type`` token against the schema of the package named in it; the
    project's ``packages`` names where the package comes from (Pulumi.yaml ``packages``, since 3.157.0)."""
    program = yaml_program()
    assert program["runtime"] == "yaml"
    source = YAML_PROGRAM.parent / program["packages"]["trainplane"]
    assert (source / "PulumiPlugin.yaml").is_file() and (source / "__main__.py").is_file()
    jobs = {name: r for name, r in program["resources"].items() if r["type"].startswith("trainplane:")}
    assert len(jobs) >= 2
    for name, resource in jobs.items():
        spec = schema["resources"].get(resource["type"])
        assert spec is not None, f"{name}: {resource['type']} is no resource of the package"
        properties = resource.get("properties", {})
        assert set(properties) <= set(spec["inputProperties"]), f"{name}: unknown inputs"
        assert set(spec["requiredInputs"]) <= set(properties), f"{name}: required inputs missing"
        for key, value in properties.items():
            if not references(value) and spec["inputProperties"][key].get("type") in SCALARS.values():
                kind = {"string": str, "integer": int, "number": (int, float), "boolean": bool}
                assert isinstance(value, kind[spec["inputProperties"][key]["type"]]), f"{name}.{key}"


def test_the_yaml_programs_references_name_outputs_the_schema_has(schema: dict[str, Any]) -> None:
    program = yaml_program()
    types = {name: r["type"] for name, r in program["resources"].items()}
    used = references(program.get("resources", {})) + references(program.get("outputs", {}))
    assert any(types[name].startswith("trainplane:") for name, _ in used), "no job output is referenced"
    assert any(not types[name].startswith("trainplane:") for name, _ in used), "no other resource feeds a job"
    for name, prop in used:
        assert name in types, f"${{{name}}} is no resource of the program"
        if types[name].startswith("trainplane:"):
            assert prop in schema["resources"][types[name]]["properties"], f"{name}.{prop} is no output"


def test_the_plugin_manifest_names_the_python_runtime_only() -> None:
    """The Python language host runs plugins with the pip toolchain in a ``venv`` only
    (pulumi/pulumi ``sdk/python/lib/pulumi/provider/experimental/ComponentProvider.md``)."""
    manifest = yaml.safe_load((REPO_ROOT / "provider" / "PulumiPlugin.yaml").read_text())
    assert manifest == {"runtime": "python"}
    requirements = (REPO_ROOT / "provider" / "requirements.txt").read_text().split()
    assert "-r" in requirements and "../requirements.txt" in requirements


# --- the plugin itself, driven as the engine drives it ---------------------------------------------------


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
