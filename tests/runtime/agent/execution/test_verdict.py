"""The verdict file holds the newest world's verdict, whichever agent writes last (issue 20: the
launcher's exit code does not depend on timing)."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path

import pytest

from runtime.agent.execution import verdict
from runtime.agent.spec.status import FAILED, SUCCEEDED
from runtime.agent.world import Node, World

pytestmark = pytest.mark.unit


def world(epoch: int, generation: int) -> World:
    return World(job="j", generation=generation, restart_count=0, max_restarts=0,
                 nodes=tuple(Node(i, f"10.0.0.{i}", 1, 1) for i in range(3)), master_port=29500,
                 distribution="spmd", coordinator=(epoch - 1, f"10.0.0.{epoch - 1}", 1), epoch=epoch)


FENCED_OUT = world(1, 1).finished(FAILED, "node 1 lost; the job failed", 121)
"""The verdict a coordinator fenced out of the job decided for its old world."""
SUCCESSOR = world(2, 2).finished(SUCCEEDED, "every rank exited 0", 0)
"""The verdict of the world that replaced it."""


@pytest.mark.parametrize("order", list(itertools.permutations([FENCED_OUT, SUCCESSOR])))
def test_the_newest_worlds_verdict_is_kept_in_either_order_of_writing(tmp_path: Path, order: tuple[World, World]):
    path = str(tmp_path / "verdict.json")
    written = [verdict.record(path, w, writer) for writer, w in enumerate(order)]
    held = json.loads(Path(path).read_text())
    assert (held["status"], held["exit_code"], held["epoch"], held["generation"]) == (SUCCEEDED, 0, 2, 2)
    assert written == [True, order[1] is SUCCESSOR]


def test_a_later_generation_of_the_same_epoch_replaces_a_verdict_and_the_same_world_rewrites_it(tmp_path: Path):
    path = str(tmp_path / "verdict.json")
    assert verdict.record(path, replace(SUCCESSOR, generation=1), 0)
    assert verdict.record(path, SUCCESSOR, 1) and verdict.record(path, SUCCESSOR, 2)
    assert verdict.held_order(path) == (2, 2)


def test_a_file_that_holds_no_verdict_of_this_module_is_replaced(tmp_path: Path):
    path = tmp_path / "verdict.json"
    path.write_text('{"status": "failed", "exit_code": 1}')
    assert verdict.held_order(str(path)) is None
    assert verdict.record(str(path), FENCED_OUT, 0)
    assert json.loads(path.read_text())["exit_code"] == 121
