"""Component tests validate what they render against the published CRDs: without them, say so once. And the
fixtures the modules of one concern share: a HOME with a kubeconfig, and the package schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from components import package
from testbed.cluster.crds import SCHEMAS_SETTING
from tests.components.componenttest import kube_home
from tests.components.schemacheck import SCHEMAS


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Stop before running anything if component tests are selected and the CRD schemas are missing."""
    if not SCHEMAS.is_dir() and any("tests/components/" in item.nodeid for item in items):
        raise pytest.UsageError(
            f"CRD schemas not found at {SCHEMAS.resolve()}: the component tests validate rendered objects "
            f"against the CRDs; run `python -m testbed.cluster build` (generates them with controller-gen from "
            f"the pinned upstream modules), put the published ones in shared/schemas beside this repository, "
            f"or set {SCHEMAS_SETTING}=DIR"
        )


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A HOME with a ~/.kube/config: the existing stack reads kubectl's default kubeconfig."""
    monkeypatch.setenv("HOME", str(kube_home(tmp_path)))
    return tmp_path


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    """The ``trainplane`` package schema, as the component analyzer infers it."""
    return package.schema()
