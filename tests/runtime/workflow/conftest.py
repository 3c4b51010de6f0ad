"""Fixtures shared by the workflow tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.runtime.kubecluster import FakeCluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[FakeCluster]:
    """The stand-in API server and stacks seam (``tests.runtime.kubecluster``), closed after the test."""
    fake = FakeCluster(tmp_path)
    try:
        yield fake
    finally:
        fake.close()
