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
from typing import Any

import jsonschema
import pulumi
import pytest

from components import package, typeddicts
from components.addons import (
    ClusterQueueArgs,
    Kueue,
    KueueArgs,
    LocalQueueArgs,
    NvidiaDevicePlugin,
    NvidiaDevicePluginArgs,
    ResourceFlavorArgs,
    TrainerV2,
    TrainerV2Args,
    TrainingOperator,
    TrainingOperatorArgs,
    Volcano,
    VolcanoArgs,
)
from components.addons.inputs import ClusterQueue, LocalQueue, ResourceFlavor
from components.docs import attribute_docs
from components.job.args import FIELD_DOCS, INPUT_FIELDS, DistributedJobArgs
from components.job.component import RESOURCE_TYPE, DistributedJob
from tests.components.componenttest import REPO_ROOT
from tests.components.packagetest import SCALARS
from tests.components.schemacheck import SCHEMAS

pytestmark = pytest.mark.unit

METASCHEMA = SCHEMAS / "pulumi-package-metaschema.json"


OUTPUTS = {"job_name", "namespace", "service_fqdn", "coordinator_url", "token"}


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


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
    TrainingOperator: TrainingOperatorArgs, Volcano: VolcanoArgs, Kueue: KueueArgs, TrainerV2: TrainerV2Args,
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
