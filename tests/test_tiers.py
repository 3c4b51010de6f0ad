"""The test tiers: every test declares one, and a unit test cannot start a process."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field

import pytest

from tests.conftest import pytest_collection_modifyitems

pytestmark = pytest.mark.unit


@dataclass
class FakeItem:
    nodeid: str
    marks: list[str] = field(default_factory=list)

    def iter_markers(self) -> list[pytest.Mark]:
        return [getattr(pytest.mark, name).mark for name in self.marks]


def test_a_test_without_a_tier_is_refused_at_collection_naming_its_module():
    items = [FakeItem("tests/a/test_x.py::test_one", ["unit"]), FakeItem("tests/b/test_y.py::test_two", ["timeout"])]
    with pytest.raises(pytest.UsageError, match=r"pytestmark = pytest.mark.unit` to: tests/b/test_y.py$"):
        pytest_collection_modifyitems(None, items)


def test_a_test_with_two_tiers_is_refused_and_one_tier_each_passes():
    with pytest.raises(pytest.UsageError, match=r"tests/a/test_x\.py"):
        pytest_collection_modifyitems(None, [FakeItem("tests/a/test_x.py::t", ["unit", "process"])])
    pytest_collection_modifyitems(None, [FakeItem("tests/a/test_x.py::t", ["cluster"])])


def test_a_unit_test_that_starts_a_process_fails_saying_which_tier_it_needs():
    refusal = r"marked unit but starts a process: mark its module `pytestmark = pytest.mark.process`"
    with pytest.raises(RuntimeError, match=refusal):
        subprocess.run([sys.executable, "-c", "pass"], check=True)
