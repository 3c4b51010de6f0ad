"""The CRDs controller-gen generates from the pinned upstream modules (``testbed/cluster/crds.py``) agree with
the published files in ``shared/schemas`` where that directory exists: same names, versions, scope and
schema (descriptions aside: controller-gen releases word and trim them differently)."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
import yaml

from testbed.cluster import crds
from testbed.cluster.build import build_all

pytestmark = pytest.mark.cluster


def without_descriptions(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: without_descriptions(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [without_descriptions(v) for v in node]
    return node


def essence(crd: dict[str, Any]) -> dict[str, Any]:
    spec = crd["spec"]
    return {"name": crd["metadata"]["name"], "group": spec["group"], "names": spec["names"], "scope": spec["scope"],
            "versions": [{"name": v["name"], "served": v["served"], "storage": v["storage"],
                          "subresources": v.get("subresources"),
                          "schema": without_descriptions(v["schema"]["openAPIV3Schema"])} for v in spec["versions"]]}


@pytest.fixture(scope="module")
def generated() -> Any:
    build_all(report=lambda _line: None)
    return crds.generate()


@pytest.mark.parametrize("name", crds.FILES)
def test_a_generated_crd_matches_the_published_one(generated: Any, name: str) -> None:
    mine = yaml.safe_load((generated / name).read_text())
    assert mine["kind"] == "CustomResourceDefinition"
    published = crds.SHARED_SCHEMAS / name
    if not published.is_file():
        pytest.skip(f"no published {name} in {crds.SHARED_SCHEMAS} to compare with")
    assert essence(mine) == essence(yaml.safe_load(published.read_text()))


def test_the_metaschema_is_a_json_schema_the_package_validates_against(generated: Any) -> None:
    """The pinned Pulumi's metaschema accepts a package document and refuses one without its name."""
    metaschema = json.loads((generated / crds.METASCHEMA).read_text())
    validator = jsonschema.validators.validator_for(metaschema)(metaschema)
    assert metaschema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    validator.validate({"name": "trainplane", "displayName": "trainplane"})
    with pytest.raises(jsonschema.ValidationError, match="'name' is a required property"):
        validator.validate({"displayName": "trainplane"})
