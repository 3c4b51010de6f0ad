"""Shared helpers: run the launcher and agents as real processes, inspect the process table."""

from __future__ import annotations

import gc
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Mapping, Optional

import pytest

from testbed.agents import AgentCluster, project_env

__all__ = ["AgentCluster", "project_env"]

ROOT = Path(__file__).resolve().parents[1]


def launch(*args: str, timeout: float = 120.0, cwd: Path = ROOT,
           env: Optional[Mapping[str, str]] = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m runtime launch ARGS`` to completion and capture its output; ``env`` is added
    to the launcher's environment."""
    return subprocess.run(
        [sys.executable, "-m", "runtime", "launch", *args],
        cwd=cwd, env=project_env(**(env or {})), capture_output=True, text=True, timeout=timeout,
    )


def processes_with(marker: str) -> list[int]:
    """Pids of live processes whose command line or environment mentions ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            blob = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().split(") ", 1)[1][0]
        except OSError:
            continue
        if marker.encode() in blob and state != "Z":
            found.append(int(entry.name))
    return found


def fault_lasts(seconds: float) -> None:
    """A fault's length (an agent stopped, a link down): the experiment's input, not a wait for an outcome."""
    time.sleep(seconds)


def wait_until(condition: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """Poll ``condition`` until it is true or ``timeout`` seconds pass; return its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return condition()


@contextmanager
def importable(root: Path, package: str) -> Iterator[Path]:
    """``package`` under the directory ``root`` importable by this process while the block runs; afterwards
    ``root`` leaves ``sys.path`` and every module of ``package`` leaves ``sys.modules`` (so the next test imports
    its own copy). Yields ``root``."""
    sys.path.insert(0, str(root))
    try:
        yield root
    finally:
        sys.path.remove(str(root))
        for name in [n for n in sys.modules if n == package or n.startswith(f"{package}.")]:
            del sys.modules[name]


class Lines:
    """A process's stderr (``stderr=subprocess.PIPE, text=True``), read line by line as it comes, by a
    daemon thread, so a test can wait on a line while the process runs."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        for line in proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def find(self, pattern: str) -> list[re.Match[str]]:
        """The matches of ``pattern`` (a regular expression) in the lines read so far."""
        return [m for m in map(re.compile(pattern).search, list(self.lines)) if m]

    def text(self) -> str:
        """Everything read, once the stream has ended (waiting up to 10 s for it)."""
        self._thread.join(timeout=10)
        return "\n".join(self.lines)


@pytest.fixture
def script(tmp_path: Path) -> Callable[[str], Path]:
    """Write a user script into the test's temporary directory; returns its path."""

    def write(source: str, name: str = "job.py") -> Path:
        path = tmp_path / name
        path.write_text(source)
        return path

    return write



TIERS = ("unit", "process", "cluster")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse a test that does not declare exactly one tier (``pytestmark = pytest.mark.unit``, or
    ``process``, ``cluster``), so ``-m unit`` and ``-m "not cluster"`` select what they say."""
    undeclared = sorted({
        item.nodeid.split("::")[0]
        for item in items
        if len({mark.name for mark in item.iter_markers() if mark.name in TIERS}) != 1
    })
    if undeclared:
        raise pytest.UsageError(
            "each test needs exactly one tier marker (" + ", ".join(TIERS) + "); add e.g. "
            "`pytestmark = pytest.mark.unit` to: " + ", ".join(undeclared)
        )


def pytest_collection(session: pytest.Session) -> None:
    """No garbage collection while collection imports every test module (torch, Pulumi, the schemas...): the
    interpreter's own full collections walked the growing heap again and again (3 s of the unit tier's
    collection) for what imports seldom leave, which :func:`pytest_collection_finish` collects once."""
    gc.disable()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Collect once, then move what collection left alive (every imported module: Pulumi's, protobuf's, the
    schemas' and the tests' own) out of the garbage collector's sight (``gc.freeze``), so a full collection
    during a test (the interpreter's own, or ``componenttest``'s after a failed program) looks only at what
    tests made since: it took 0.2 to 0.4 s each over everything imported, tens of seconds over the suite."""
    gc.collect()
    gc.freeze()
    gc.enable()


@pytest.fixture(autouse=True)
def _unit_tests_start_no_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``unit`` test that starts a child process fails, naming the tier it belongs to instead."""
    if request.node.get_closest_marker("unit") is None:
        return

    def refuse(*args: object, **kwargs: object) -> None:
        raise RuntimeError(
            f"{request.node.nodeid} is marked unit but starts a process: mark its module "
            "`pytestmark = pytest.mark.process`, or replace the process with a fake"
        )

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    monkeypatch.setattr(os, "fork", refuse)
