"""testbed.cluster.reaper: what a killed test run leaves of the real node (containerd's shims, re-parented away from
it, and their containers' processes) is killed once that run is gone, and nothing while it lives.

A stand-in plays each part with real processes: the "test run" is a Python process that starts the reaper and a
"shim" in a session of its own (as containerd's shims are) whose command line names the node's socket, with a
"container" child, and a tmpfs mounted below the node's directory (as a pod's network namespace or volume is); the
test SIGKILLs the run, as a CI timeout would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from testbed.cluster.reaper import REPO_ROOT, descendants, mounts_under, unmount_under
from tests.conftest import wait_until

pytestmark = pytest.mark.process

RUN = """
import subprocess, sys, time
from pathlib import Path
from testbed.cluster import reaper
marker, root = sys.argv[1], sys.argv[2]
watcher = reaper.start(marker, None, Path(root))
shim = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                         "subprocess.Popen(['sleep', '300']); time.sleep(300)", "-address", marker],
                        start_new_session=True)
print(watcher.pid, shim.pid, flush=True)
time.sleep(300)
"""


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def test_a_killed_runs_shims_containers_and_mounts_go_and_not_before(tmp_path: Path) -> None:
    marker = f"/tmp/real-node-{uuid.uuid4().hex}/containerd.sock"
    (tmp_path / "netns").mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(tmp_path / "netns")], check=True)
    run = subprocess.Popen([sys.executable, "-c", RUN, marker, str(tmp_path)], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                           text=True)
    pids: list[int] = []
    try:
        assert run.stdout is not None
        watcher, shim = map(int, run.stdout.readline().split())
        pids = [watcher, shim]
        assert wait_until(lambda: len(descendants(shim)) == 1, timeout=30), "the shim's container started"
        [container] = descendants(shim)
        pids.append(container)
        assert all(map(alive, pids)) and mounts_under(tmp_path), "nothing is reaped while the run lives"
        run.send_signal(signal.SIGKILL)
        run.wait()
        assert wait_until(lambda: not alive(shim) and not alive(container), timeout=30), "reaped once the run died"
        assert wait_until(lambda: not alive(watcher), timeout=30), "the reaper exits after reaping"
        assert mounts_under(tmp_path) == []
    finally:
        run.kill()
        unmount_under(tmp_path)
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
