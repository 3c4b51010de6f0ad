"""The default log directory is the user's own, and old job directories in it are pruned."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

from runtime.local import logdirs
from tests.conftest import ROOT, launch, project_env

pytestmark = pytest.mark.process

HOLD_DIR = """
import sys, time
from runtime.local import logdirs
logdirs.hold(sys.argv[1])
print("held", flush=True)
time.sleep(60)
"""


def logs_of(stderr: str) -> Path:
    """The log directory a launch announced."""
    return Path(re.search(r"; logs in (\S+)", stderr)[1])


def test_a_jobs_default_log_directory_is_private_to_its_user(tmp_path: Path, script):
    result = launch("--nnodes", "1", str(script("print('ok')\n")), env={"TMPDIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    base = tmp_path / f"trainplane-{os.getuid()}"
    assert logs_of(result.stderr).parent == base
    assert stat.S_IMODE(base.stat().st_mode) == 0o700


def test_old_job_directories_beyond_the_newest_are_removed_but_never_a_running_jobs(tmp_path: Path, script):
    base = tmp_path / f"trainplane-{os.getuid()}"
    base.mkdir(mode=0o700)
    for age in range(logdirs.KEEP_JOBS + 5):  # job-0 newest ... job-24 oldest
        (base / f"job-{age}").mkdir()
        (base / f"job-{age}" / logdirs.LOCK_FILE).touch()  # as a job that ran leaves it
        os.utime(base / f"job-{age}", (1_000_000 - age, 1_000_000 - age))
    running = subprocess.Popen([sys.executable, "-c", HOLD_DIR, str(base / "job-24")], cwd=ROOT, env=project_env(),
                               stdout=subprocess.PIPE, text=True)
    try:
        assert running.stdout.readline().strip() == "held"
        result = launch("--nnodes", "1", str(script("print('ok')\n")), env={"TMPDIR": str(tmp_path)})
        assert result.returncode == 0, result.stderr
    finally:
        running.kill()
        running.wait()
    kept = {p.name for p in base.iterdir()}
    newest = {f"job-{age}" for age in range(logdirs.KEEP_JOBS - 1)}
    assert kept == newest | {"job-24", logs_of(result.stderr).name}


def test_a_default_base_others_can_read_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    (tmp_path / f"trainplane-{os.getuid()}").mkdir()
    os.chmod(tmp_path / f"trainplane-{os.getuid()}", 0o755)  # noqa: S103 - the permissive mode refused
    with pytest.raises(RuntimeError, match="is not a private directory of this user"):
        logdirs.default_base()


def test_a_directory_another_launcher_prunes_first_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Two launches at the same instant prune the same base: the one that comes second finds a directory
    it listed already removed (it failed with FileNotFoundError creating the lock file) and goes on."""
    for age, name in enumerate(("new", "old", "older")):
        (tmp_path / name).mkdir()
        os.utime(tmp_path / name, (1000 - age, 1000 - age))
    real_lock = logdirs.try_lock

    def lock_after_the_other_pruner(path: str) -> Optional[int]:
        if "older" in path:
            shutil.rmtree(tmp_path / "older")  # the other launcher got there between the scan and the lock
        return real_lock(path)

    monkeypatch.setattr(logdirs, "try_lock", lock_after_the_other_pruner)
    assert logdirs.prune(str(tmp_path), keep=1) == [str(tmp_path / "old")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new"]
