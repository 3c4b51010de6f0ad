"""The CRDs controller-gen generates from the pinned upstream modules (``testbed/cluster/crds.py``) agree with
the published files in ``shared/schemas`` where that directory exists: same names, versions, scope and
schema (descriptions aside: controller-gen releases word and trim them differently). The ones a module ships as
released (JobSet's, the Trainer's: ``CrdSource.shipped``) are those files byte for byte."""

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


@pytest.mark.parametrize("name", [f for s in crds.SOURCES if s.shipped for f in s.files])
def test_a_crd_shipped_in_its_module_is_the_published_file(generated: Any, name: str) -> None:
    """sigs.k8s.io/jobset v0.12.0 ``config/components/crd/bases`` and github.com/kubeflow/trainer/v2 v2.3.0
    ``manifests/base/crds`` (each release's ``make manifests`` output) are the files ``shared/schemas`` copied from
    the same tags."""
    published = crds.SHARED_SCHEMAS / name
    if not published.is_file():
        pytest.skip(f"no published {name} in {crds.SHARED_SCHEMAS} to compare with")
    assert (generated / name).read_bytes() == published.read_bytes()


def test_the_metaschema_is_a_json_schema_the_package_validates_against(generated: Any) -> None:
    """The pinned Pulumi's metaschema accepts a package document and refuses one without its name."""
    metaschema = json.loads((generated / crds.METASCHEMA).read_text())
    validator = jsonschema.validators.validator_for(metaschema)(metaschema)
    assert metaschema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    validator.validate({"name": "trainplane", "displayName": "trainplane"})
    with pytest.raises(jsonschema.ValidationError, match="'name' is a required property"):
        validator.validate({"displayName": "trainplane"})
