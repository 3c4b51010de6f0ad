"""testbed.lightweight: a process hosting many agents is set up as the benchmarks' notes say (a longer GIL switch
interval; young-generation collections only)."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator

import pytest

from testbed.lightweight import HOST_GC_THRESHOLDS, HOST_SWITCH_INTERVAL, tune_host_interpreter

pytestmark = pytest.mark.unit


@pytest.fixture
def restored() -> Iterator[None]:
    interval, thresholds = sys.getswitchinterval(), gc.get_threshold()
    yield
    sys.setswitchinterval(interval)
    gc.set_threshold(*thresholds)


def full_collections_while_keeping(objects: int) -> int:
    """Full collections the collector ran on its own while ``objects`` new lists were kept alive."""
    before = gc.get_stats()[2]["collections"]
    kept = [[] for _ in range(objects)]
    assert len(kept) == objects
    return gc.get_stats()[2]["collections"] - before


@pytest.mark.usefixtures("restored")
def test_a_host_collects_the_young_generations_as_by_default_and_never_the_whole_heap():
    default_young = gc.get_threshold()[:2]
    assert full_collections_while_keeping(2_000_000) > 0  # as a host's worlds grow at formation, by default
    tune_host_interpreter()
    assert gc.get_threshold() == HOST_GC_THRESHOLDS
    assert HOST_GC_THRESHOLDS[:2] == default_young
    assert sys.getswitchinterval() == pytest.approx(HOST_SWITCH_INTERVAL)
    young = gc.get_stats()[0]["collections"]
    assert full_collections_while_keeping(2_000_000) == 0
    assert gc.get_stats()[0]["collections"] > young
