"""A membership change that reaches a rank during its normal exit is not fatal (issue 20, item 3).

The rank runs under the real bootstrap; its ``main`` returns and an atexit handler keeps the process
in its shutdown while the test sends it the delivery signal again and again, as an agent would when
a node is lost just then. CPython's finalisation puts back the default action of every signal with
a Python handler (``Modules/signalmodule.c``, ``_PySignal_Fini``: ``PyOS_setsig(signum, SIG_DFL)``
unless the handler is ``SIG_DFL`` or ``SIG_IGN``), and a real-time signal's default action ends the
process: before the fix the rank died with ``128 + SIGRTMIN + 4`` although it had finished.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.agent import contract
from runtime.agent.execution.delivery import DELIVERY_SIGNAL
from tests.conftest import ROOT, project_env, wait_until

pytestmark = pytest.mark.process

SCRIPT = """
import atexit, os, sys, time
import runtime  # arms delivery: a change is raised in the main thread from here on

def linger():
    open(sys.argv[1], "w").close()  # main has returned: the test starts signalling
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        time.sleep(0.01)

atexit.register(linger)
print("main returns", flush=True)
"""


def test_delivery_signals_during_a_ranks_normal_exit_leave_it_exiting_0(tmp_path: Path):
    script, exiting, world_file = tmp_path / "rank.py", tmp_path / "exiting", tmp_path / "world.json"
    script.write_text(SCRIPT)
    world_file.write_text(json.dumps({"generation": 1, "env": {}, "added_ips": [], "removed_ips": [],
                                      "previous_ips": [], "current_ips": []}))
    env = project_env(**{contract.TRAINPLANE_WORLD_FILE: str(world_file), contract.TRAINPLANE_GENERATION: "1"})
    proc = subprocess.Popen([sys.executable, "-m", "runtime.agent.execution.bootstrap", str(script), str(exiting)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(exiting.exists, timeout=60), proc.stderr.read() if proc.poll() is not None else ""
        sent = 0
        while proc.poll() is None:
            try:
                os.kill(proc.pid, DELIVERY_SIGNAL)
                sent += 1
            except ProcessLookupError:
                break
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert sent > 10, "the signals reached the process during its exit"
    assert proc.returncode == 0, (proc.returncode, err)
    assert out == "main returns\n" and "WorkerMembershipChanged" not in err
