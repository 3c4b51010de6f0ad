"""The YAML program in examples/: it uses the ``trainplane`` package by path, with the schema's type tokens,
inputs and outputs."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from tests.components.componenttest import REPO_ROOT
from tests.components.packagetest import SCALARS

pytestmark = pytest.mark.unit

YAML_PROGRAM = REPO_ROOT / "examples" / "yaml" / "Pulumi.yaml"


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
