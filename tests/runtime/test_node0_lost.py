"""Node 0 is no more special than any node in an elastic job: losing its agent, by SIGKILL or by the
SIGTERM an eviction, a drain or a spot reclaim sends one pod, leaves the job running under a new
coordinator, both under the launcher and as separate agents (as in pods)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runtime.agent.net.transport import request_json
from runtime.local import jobs
from tests.conftest import ROOT, Lines, project_env, wait_until
from tests.runtime.agent.rendezvous.test_elastic_jobs import all_told, recording, told_of, whole_world

pytestmark = pytest.mark.process

RECORDER = ROOT / "bench" / "recorder.py"


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_node_0s_agent_lost_under_the_launcher_leaves_the_survivors_running(tmp_path: Path, sig: signal.Signals):
    """The launcher used to kill the survivors 10 s after node 0's agent exited, and node 0's agent
    stopped the whole job on SIGTERM."""
    out, stop = tmp_path / "events", tmp_path / "stop"
    out.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "runtime", "launch", "--nnodes", "2:3", str(RECORDER), str(out), str(stop)],
        cwd=ROOT, env=project_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines = Lines(proc)
    try:
        assert wait_until(lambda: len(list(out.glob("node-*.json"))) == 3, timeout=60), lines.text()
        [started] = lines.find(r"\[trainplane node 0\] generation 1: .* \(agent pid (\d+)\)")
        os.kill(int(started[1]), sig)
        killed = time.monotonic()
        assert wait_until(lambda: all_told(out, 2, 2), timeout=30), lines.text()
        time.sleep(max(0.0, killed + jobs.AGENT_EXIT_GRACE + 1 - time.monotonic()))
        assert proc.poll() is None, "the survivors outlive the old coordinator's grace"
        told = told_of(out, 2)
        assert sorted((e["rank"], e["world_size"], e["master"]) for e in told) == [("0", "2", "127.0.0.3"),
                                                                                 ("1", "2", "127.0.0.3")]
        stop.touch()
        assert proc.wait(timeout=60) == 0, lines.text()
        assert "node 1 takes over" in lines.text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sigterm_to_node_0s_agent_leaves_separate_agents_running_under_a_new_coordinator(tmp_path: Path):
    out, stop = tmp_path / "events", tmp_path / "stop"
    out.mkdir()
    with recording(tmp_path, (RECORDER, out, stop), 3, TRAINPLANE_MIN_WORKERS="2") as job:
        after = whole_world(job, 3) + 1
        job.agents[0].send_signal(signal.SIGTERM)
        assert job.agents[0].wait(timeout=30) == 128 + signal.SIGTERM
        assert wait_until(lambda: all_told(out, 2, after), timeout=20), job.log(1)
        snapshot = request_json("127.0.0.11", job.port, "GET", "/members", job.token, job=job.job)
        assert snapshot["status"] == "running" and snapshot["generation"] == after, job.log(1)
        assert [m["node_id"] for m in snapshot["members"] if m["node_rank"] is not None] == [1, 2]
        stop.touch()
        assert job.agents[1].wait(timeout=30) == 0 and job.agents[2].wait(timeout=30) == 0
