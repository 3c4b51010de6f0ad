"""LocalProcesses with real processes: output prefixes and exit reports follow a renumbering."""

from __future__ import annotations

import io
import os
import sys
import threading
from pathlib import Path

import pytest

from runtime.agent.execution.procs import LocalProcesses, ProcExit
from tests.conftest import ROOT, wait_until

pytestmark = pytest.mark.process

WAITER = """
import os, sys, time
print("before", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.01)
print("after", flush=True)
"""


def test_after_a_renumbering_output_and_exit_reports_carry_the_new_rank(tmp_path: Path):
    script = tmp_path / "waiter.py"
    script.write_text(WAITER)
    go = tmp_path / "go"
    out, err = io.BytesIO(), io.BytesIO()
    exits: list[ProcExit] = []
    done = threading.Event()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = LocalProcesses(generation=1, first_rank=2, envs=[env], entrypoint=[str(script), str(go)],
                           on_exit=lambda e: (exits.append(e), done.set()), log_dir=str(tmp_path / "logs"), out=out,
                           err=err, python=sys.executable)
    procs.start()
    try:
        assert wait_until(lambda: b"before" in out.getvalue(), timeout=60)
        procs.renumber(0)
        go.touch()
        assert done.wait(60)
    finally:
        procs.stop(1.0)
    assert out.getvalue().splitlines() == [b"[rank 2] before", b"[rank 0] after"]
    assert [(e.rank, e.exit_code) for e in exits] == [(0, 0)]
    assert (tmp_path / "logs" / "rank-2.log").read_bytes() == b"before\nafter\n", "the log keeps its file"
