"""examples/ddp_digits.py saves its checkpoint in a DistributedJob's checkpoint dir by default: the component sets
``CHECKPOINT_DIR`` for every rank (components/job/volumes.py), and the example's ``--checkpoint`` default reads it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from components.job.volumes import CHECKPOINT_DIR_ENV

pytestmark = pytest.mark.process  # importing torch runs ldconfig

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "ddp_digits.py"


def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ddp_digits_under_test", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_checkpoint_goes_to_the_jobs_checkpoint_dir_when_it_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["ddp_digits.py"])
    monkeypatch.setenv(CHECKPOINT_DIR_ENV, "/checkpoints")
    assert example().parse_args().checkpoint == "/checkpoints/ddp_digits.pt"
    monkeypatch.delenv(CHECKPOINT_DIR_ENV)
    assert example().parse_args().checkpoint == "checkpoints/ddp_digits.pt"
    monkeypatch.setattr(sys, "argv", ["ddp_digits.py", "--checkpoint", "/elsewhere/model.pt"])
    monkeypatch.setenv(CHECKPOINT_DIR_ENV, "/checkpoints")
    assert example().parse_args().checkpoint == "/elsewhere/model.pt"
