"""A membership change that arrives before the user's code can handle it never fails an elastic job:
delivery is armed when the user's code first imports ``runtime``; before that the change waits, and
the process starts its work in the new world (``os.environ`` updated at arming)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, project_env, wait_until
from tests.runtime.test_node0_lost import Lines

pytestmark = pytest.mark.process

SLOW_IMPORT = """
import json, os, time

def generation():
    try:
        with open(os.environ["TRAINPLANE_WORLD_FILE"]) as f:
            return json.load(f)["generation"]
    except (OSError, ValueError, KeyError):
        return 1

deadline = time.monotonic() + 60
while generation() < 2 and time.monotonic() < deadline:  # a framework's long import, over once the change came
    time.sleep(0.05)
"""
"""A long import that lasts until the change has reached this process's world file: the change arrives
during it however long the loss takes to detect (a fixed 10 s was once too short in a busy full run,
and a change raised after ``import runtime``, in ``import torch`` or a process group's rendezvous, is
the user's code's to handle, which this script does not do outside its loop)."""
SCRIPT = """
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import slow_framework  # the change arrives while this import runs, before any handler exists

import runtime
import torch
import torch.distributed as dist

while True:
    try:
        dist.init_process_group("gloo")
        value = torch.ones(1)
        dist.all_reduce(value)
        print("world", os.environ["TRAINPLANE_GENERATION"], dist.get_world_size(), value.item(), flush=True)
        dist.destroy_process_group()
        break
    except runtime.WorkerMembershipChanged:
        if dist.is_initialized():
            dist.destroy_process_group()
"""


def test_a_node_killed_while_the_others_import_leaves_them_to_finish_in_the_new_world(tmp_path: Path):
    (tmp_path / "slow_framework.py").write_text(SLOW_IMPORT)
    (tmp_path / "job.py").write_text(SCRIPT)
    proc = subprocess.Popen([sys.executable, "-m", "runtime", "launch", "--nnodes", "2:3", str(tmp_path / "job.py")],
                            cwd=ROOT, env=project_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = Lines(proc)
    try:
        assert wait_until(lambda: lines.find(r"\[trainplane node 2\] generation 1: .* \(agent pid (\d+)\)"),
                          timeout=60), lines.text()
        [started] = lines.find(r"\[trainplane node 2\] generation 1: .* \(agent pid (\d+)\)")
        os.kill(int(started[1]), signal.SIGKILL)  # right after its generation 1 line, as the README invites
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, lines.text()
        worlds = re.findall(r"\[rank \d\] world (\d+) (\d) ([\d.]+)", out)
        assert worlds == [("2", "2", "2.0")] * 2, out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


LIBRARY_RELATIVE_IMPORT = """
import sys
import torch._inductor.codecache  # torch's own `from .runtime import autotune_cache` (level 1) runs here
delivery = sys.modules["runtime.agent.execution.delivery"]  # read without importing: that would arm it
print("after inductor", delivery._Gate.armed, flush=True)
import runtime
print("after runtime", delivery._Gate.armed, flush=True)
"""


def test_a_librarys_relative_import_of_its_own_runtime_package_does_not_arm_delivery(tmp_path: Path):
    """torch 2.13.0 ``torch/_inductor/codecache.py`` does ``from .runtime import autotune_cache``: an
    import of ``torch._inductor.runtime`` (``__import__`` with ``level=1``), not of ours. Only an
    absolute import of ``runtime`` by the user's code arms delivery."""
    (tmp_path / "job.py").write_text(LIBRARY_RELATIVE_IMPORT)
    done = subprocess.run([sys.executable, "-m", "runtime.agent.execution.bootstrap", str(tmp_path / "job.py")],
                          cwd=ROOT, env=project_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["after inductor False", "after runtime True"], done.stdout + done.stderr
