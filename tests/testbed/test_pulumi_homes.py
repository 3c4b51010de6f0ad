"""Test ``PULUMI_HOME`` directories of deleted venvs are pruned; live, unstamped and foreign ones are kept."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from testbed.cluster.engine import HOME_PREFIX, INTERPRETER_LINE, prune_homes

pytestmark = pytest.mark.unit


def home(root: Path, name: str, interpreter: str | None) -> Path:
    made = root / f"{HOME_PREFIX}{name}"
    (made / "plugins").mkdir(parents=True)
    if interpreter is not None:
        (made / ".installed").write_text(f"kubernetes 4.0.0\n{INTERPRETER_LINE}{interpreter}\n")
    return made


def test_only_homes_of_gone_interpreters_are_pruned(tmp_path: Path) -> None:
    gone = home(tmp_path, "gone", str(tmp_path / "deleted-clone" / ".venv" / "bin" / "python3"))
    live = home(tmp_path, "live", sys.executable)
    installing = home(tmp_path, "installing", None)
    other = tmp_path / "kubernetes-v1.34.4-go1.26.8"
    other.mkdir()
    assert prune_homes(tmp_path) == [gone]
    assert not gone.exists()
    assert live.exists() and installing.exists() and other.exists()
