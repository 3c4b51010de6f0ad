"""Per-generation log directories are bounded: a job that restarts again and again keeps only the
newest ``KEEP_GENERATIONS`` of them per node (it used to keep one per generation, hundreds in a
crash loop)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.agent.execution.generation import KEEP_GENERATIONS
from tests.conftest import launch

pytestmark = pytest.mark.process


def test_a_restarting_job_keeps_only_the_newest_generation_directories(tmp_path: Path, script):
    restarts = KEEP_GENERATIONS + 2
    result = launch("--nnodes", "1", "--max-restarts", str(restarts), "--log-dir", str(tmp_path / "logs"),
                    str(script("import sys\nsys.exit(1)\n")), timeout=240)
    assert result.returncode == 1, result.stderr
    assert f"restarting ({restarts}/{restarts}) as generation {restarts + 1}" in result.stderr
    [node] = (tmp_path / "logs").glob("*/node-0")
    kept = sorted(int(p.name[4:]) for p in node.glob("gen-*"))
    assert kept == list(range(restarts + 2 - KEEP_GENERATIONS, restarts + 2))
