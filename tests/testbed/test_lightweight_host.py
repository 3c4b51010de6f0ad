"""testbed.lightweight: a process hosting many agents is set up as the benchmarks' notes say (a longer GIL switch
interval; young-generation collections only), and a host of one agent keeps CPython's defaults, as a production
agent's interpreter does."""

from __future__ import annotations

import argparse
import gc
import json
import sys
from collections.abc import Iterator

import pytest

from testbed import lightweight
from testbed.lightweight import HOST_GC_THRESHOLDS, HOST_SWITCH_INTERVAL, tune_host_interpreter

pytestmark = pytest.mark.unit


@pytest.fixture
def restored() -> Iterator[tuple[float, tuple[int, int, int]]]:
    interval, thresholds = sys.getswitchinterval(), gc.get_threshold()
    yield interval, thresholds
    sys.setswitchinterval(interval)
    gc.set_threshold(*thresholds)


def full_collections_while_keeping(objects: int) -> int:
    """Full collections the collector ran on its own while ``objects`` new lists were kept alive."""
    before = gc.get_stats()[2]["collections"]
    kept = [[] for _ in range(objects)]
    assert len(kept) == objects
    return gc.get_stats()[2]["collections"] - before


def test_a_host_of_many_agents_collects_the_young_generations_as_by_default_and_never_the_whole_heap(restored):
    default_young = gc.get_threshold()[:2]
    assert full_collections_while_keeping(2_000_000) > 0  # as a host's worlds grow at formation, by default
    tune_host_interpreter(128)
    assert gc.get_threshold() == HOST_GC_THRESHOLDS
    assert HOST_GC_THRESHOLDS[:2] == default_young
    assert sys.getswitchinterval() == pytest.approx(HOST_SWITCH_INTERVAL)
    young = gc.get_stats()[0]["collections"]
    assert full_collections_while_keeping(2_000_000) == 0
    assert gc.get_stats()[0]["collections"] > young


def test_a_host_of_one_agent_keeps_the_interpreters_defaults(restored):
    tune_host_interpreter(1)
    assert (sys.getswitchinterval(), gc.get_threshold()) == restored


class InstantAgent:
    """An agent stand-in whose run returns at once (``host`` joins every agent's thread)."""

    def __init__(self, *_args: object, **_kwargs: object) -> None:
        pass

    def run(self) -> None:
        """Return at once."""


def test_the_host_command_tunes_its_interpreter_for_the_agents_it_runs(restored, monkeypatch, capsys):
    monkeypatch.setattr(lightweight, "Agent", InstantAgent)
    settings = {"job_name": "j", "token": "t" * 16, "workers": 3, "num_proc": 1, "entrypoint": ["none.py"]}
    lightweight.host(argparse.Namespace(first=1, count=2, stride=1, settings=json.dumps(settings)))
    assert capsys.readouterr().out == "ready\n"
    assert gc.get_threshold() == HOST_GC_THRESHOLDS
    assert sys.getswitchinterval() == pytest.approx(HOST_SWITCH_INTERVAL)
