"""Component tests validate what they render against the published CRDs: without them, say so once."""

from __future__ import annotations

import pytest

from tests.components.componenttest import SCHEMAS, SCHEMAS_SETTING


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Stop before running anything if component tests are selected and the CRD schemas are missing."""
    if not SCHEMAS.is_dir() and any("tests/components/" in item.nodeid for item in items):
        raise pytest.UsageError(
            f"CRD schemas not found at {SCHEMAS.resolve()}: the component tests validate rendered objects "
            f"against the published CRDs in shared/schemas beside this repository; put that directory there "
            f"or set {SCHEMAS_SETTING}=DIR"
        )
