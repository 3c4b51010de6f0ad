"""The launcher's exit codes against a rank's: a rank's 2 or 3 is passed through, and the last line
says whose a non-zero code is; an agent stopped past the heartbeat TTL while every rank finishes
does not change a succeeded job's 0, whichever node it is and whichever agent writes last."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.agent import contract
from tests.conftest import ROOT, Lines, fault_lasts, launch, project_env, wait_until
from tests.runtime.local.test_launch import QUORUM_DRIVER

pytestmark = pytest.mark.process


@pytest.mark.parametrize("code", [contract.EXIT_USAGE, contract.EXIT_RENDEZVOUS, 5])
def test_a_ranks_exit_code_is_passed_through_and_the_last_line_says_it_is_the_ranks(script, code: int):
    path = script(f"import os, sys\nsys.exit({code} if os.environ['RANK'] == '1' else 0)\n")
    result = launch("--nnodes", "2", str(path))
    assert result.returncode == code, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"[trainplane] exit code {code}: rank 1's own exit code (node 1 at 127.0.0.3), passed through (not the "
        f"launcher's)")


def test_a_world_that_never_formed_ends_with_the_launchers_own_3(script):
    path = script("print('never runs')\n")
    result = subprocess.run([sys.executable, "-c", QUORUM_DRIVER, "--workers", "2", "--quorum-timeout", "1.5",
                             str(path)], cwd=ROOT, env=project_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == contract.EXIT_RENDEZVOUS, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "[trainplane] exit code 3: the launcher's own: quorum not met after 1.5 s: 1 node(s) registered, 2 needed")


def test_a_job_that_succeeds_prints_no_exit_line(script):
    result = launch("--nnodes", "2", str(script("print('ok')\n")))
    assert result.returncode == 0, result.stderr
    assert "exit code" not in result.stderr


def test_a_fixed_size_job_that_loses_a_node_ends_with_the_launchers_own_1(script):
    """Rank 1 kills its own agent (SIGKILL: no verdict, no failing process): the coordinator finds
    node 1 gone and fails the job, and the launcher calls 1 its own code."""
    path = script("import os, signal, time\nif os.environ['RANK'] == '1':\n    os.kill(os.getppid(), signal.SIGKILL)\n"
                  "time.sleep(60)\n")
    result = launch("--nnodes", "2", "--master-port", "0", "--grace-period", "1", str(path))
    assert result.returncode == contract.EXIT_NODE_LOST == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("[trainplane] exit code 1: the launcher's own: node 1 (127.0.0.3)"), last
    assert "probe failed" in last or "heartbeat" in last, last  # the watch's probe, or silence past the TTL


RECORDER = ROOT / "bench" / "recorder.py"
TTL = 3.0
"""The launcher's default heartbeat TTL, seconds."""


@pytest.mark.parametrize(("node", "finish"), [(0, "at once"), (0, "after the takeover"), (1, "at once")])
def test_an_agent_stopped_past_the_ttl_while_every_rank_finishes_leaves_the_job_succeeded(tmp_path: Path, node: int,
                                                                                        finish: str):
    """``--nnodes 2:3``, node ``node``'s agent stopped for 3 TTLs while every rank finishes (at once, or
    once nodes 1 and 2 have taken over from a stopped node 0). Before, node 0 stopped as the ranks
    finished left the takeover's world waiting for reports that had gone to node 0 (the launcher never
    ended), a stopped node 1 waited forever for a coordinator that had gone, and the fenced-out node 0
    wrote its own epoch's verdict after the successor's (the file held whichever came last)."""
    out, stop = tmp_path / "events", tmp_path / "stop"
    out.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "runtime", "launch", "--nnodes", "2:3", "--log-dir",
                             str(tmp_path / "logs"), str(RECORDER), str(out), str(stop)],
                            cwd=ROOT, env=project_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines = Lines(proc)
    try:
        assert wait_until(lambda: len(list(out.glob("node-*.json"))) == 3, timeout=60), lines.text()
        [started] = lines.find(rf"\[trainplane node {node}\] generation 1: .* \(agent pid (\d+)\)")
        agent = int(started[1])
        os.kill(agent, signal.SIGSTOP)
        try:
            if finish == "at once":
                stop.touch()
            else:
                assert wait_until(lambda: lines.find("node 1 takes over in epoch 2"), timeout=30), lines.lines
                stop.touch()
            fault_lasts(3 * TTL)
        finally:
            os.kill(agent, signal.SIGCONT)
        assert proc.wait(timeout=120) == 0, lines.text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = lines.text()
    assert re.search(r"\[trainplane node \d\] job succeeded: every rank exited 0", text), text
    assert "job failed" not in text and "exiting 121" not in text, text
    [held] = (tmp_path / "logs").glob("*/verdict.json")
    epochs = [int(e) for e in re.findall(r"takes over in epoch (\d+)", text)] or [1]
    assert json.loads(held.read_text())["epoch"] == max(epochs), (held.read_text(), text)
