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


def legacy(root: Path, name: str, interpreter: str) -> Path:
    """A home stamped before stamps named the interpreter: the plugin's launcher names it."""
    made = home(root, name, None)
    (made / ".installed").write_text("kubernetes 4.0.0\nrandom 4.21.4\n")
    plugin = made / "plugins" / "resource-random-v4.21.4"
    plugin.mkdir()
    (plugin / "pulumi-resource-random").write_text(f'#!/bin/sh\nexec "{interpreter}" "$(dirname "$0")/p.py" "$@"\n')
    return made


def test_only_homes_of_gone_interpreters_are_pruned(tmp_path: Path) -> None:
    gone = home(tmp_path, "gone", str(tmp_path / "deleted-clone" / ".venv" / "bin" / "python3"))
    old_gone = legacy(tmp_path, "old-gone", str(tmp_path / "other-clone" / ".venv" / "bin" / "python3"))
    old_live = legacy(tmp_path, "old-live", sys.executable)
    live = home(tmp_path, "live", sys.executable)
    installing = home(tmp_path, "installing", None)
    other = tmp_path / "kubernetes-v1.34.4-go1.26.8"
    other.mkdir()
    assert prune_homes(tmp_path) == [gone, old_gone]
    assert not gone.exists() and not old_gone.exists()
    assert live.exists() and installing.exists() and other.exists() and old_live.exists()
