"""Membership for real: heartbeats, failure detection, delivery into user code, elastic worlds."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.agent import contract
from runtime.agent.net.transport import request_json
from tests.conftest import ROOT, AgentCluster, processes_with, project_env, wait_until

pytestmark = pytest.mark.process


def events(out: Path) -> dict[str, list[dict]]:
    return {p.name: json.loads(p.read_text() or "[]") for p in out.glob("node-*.json")}


@pytest.fixture
def recorder(tmp_path: Path):
    out = tmp_path / "events"
    out.mkdir()
    return ROOT / "bench" / "recorder.py", out, tmp_path / "stop"


def all_told(out: Path, expected: int, generation: int) -> bool:
    told = [e for evs in events(out).values() for e in evs if e["generation"] >= generation]
    return len(told) >= expected


def told_of(out: Path, generation: int) -> list[dict]:
    """The changes to ``generation`` that processes recorded."""
    return [e for evs in events(out).values() for e in evs if e["generation"] == generation]


@contextlib.contextmanager
def recording(tmp_path: Path, recorder, workers: int, *mode: str, **settings: str) -> Iterator[AgentCluster]:
    """``workers`` hand-started agents whose processes run bench/recorder.py, once every process has
    started; closed afterwards."""
    script, out, stop = recorder
    job = AgentCluster(tmp_path, [str(script), str(out), str(stop), *mode], workers=workers, **settings)
    try:
        assert wait_until(lambda: len(events(out)) >= workers, timeout=60)
        yield job
    finally:
        job.close()


def whole_world(job: AgentCluster, workers: int, host: str = "127.0.0.10") -> int:
    """Wait until the coordinator on ``host`` runs a world of all ``workers`` nodes, each heard from
    within the last 1.5 s (two beat caps of a two-level tree: not yet suspect); its generation.
    A test measures its own change from there, so a change while the agents start (a node slow to
    beat on a loaded machine) cannot be mistaken for it."""

    generation: list[int] = []

    def whole() -> bool:
        snapshot = request_json(host, job.port, "GET", "/members", job.token, job=job.job)
        members = [m for m in snapshot["members"] if m["node_rank"] is not None]
        generation[:] = [snapshot["generation"]]
        return len(members) == workers and all(m["state"] == "running" and m["last_seen_s"] < 1.5 for m in members)

    assert wait_until(whole, timeout=30), job.log(0)
    return generation[0]


def test_crashing_process_is_told_to_every_other_node_by_the_fast_path(tmp_path: Path, recorder):
    """The coordinator removes the node for its failure report (it names the rank and exit code), not
    for its silence: with a 10 s TTL its heartbeats could not have expired in the 10 s waited."""
    _, out, stop = recorder
    # max_restarts 1: the crash spends node 2's budget of one failure (issue 12), and the job goes on.
    with recording(tmp_path, recorder, 3, TRAINPLANE_MIN_WORKERS="2", TRAINPLANE_HEARTBEAT_TTL="10",
                   TRAINPLANE_MAX_RESTARTS="1", CRASH_RANK="2") as job:
        assert wait_until((out / "crash-time").exists, timeout=30)
        assert wait_until(lambda: all_told(out, 2, 2), timeout=10)
        told = told_of(out, 2)
        assert {e["how"] for e in told} == {"raised"}
        assert all(e["removed"] == ["127.0.0.12"] and e["world_size"] == "2" for e in told)
        assert "rank 2 (node 2 at 127.0.0.12, local rank 0) exited with code 5" in job.log(0)
        assert "sent no heartbeat" not in job.log(0)
        stop.touch()
        codes = job.wait(timeout=30)
        assert codes[0] == 0 and codes[1] == 0


def test_an_elastic_job_past_a_nodes_budget_fails_for_good_with_every_agent_exiting_121(tmp_path: Path, recorder):
    """Every agent (the pods' containers) exits ``EXIT_JOB_FAILED``, which the Indexed Job's pod
    failure policy fails the Job on, instead of the rank's 5, which would count toward
    ``backoffLimit`` and have the pods replaced: a new world, the job run again from the start."""
    _, out, _ = recorder
    with recording(tmp_path, recorder, 3, TRAINPLANE_MIN_WORKERS="2", CRASH_RANK="2") as job:
        assert wait_until((out / "crash-time").exists, timeout=30)
        assert job.wait(timeout=60) == {i: contract.EXIT_JOB_FAILED for i in range(3)}, job.log(0)
        assert "past its budget (max_restarts 0); the last: rank 2" in job.log(0)
        assert "exiting 121: the elastic job failed for good (its verdict's exit code is 5)" in job.log(1)


def test_killed_node_is_detected_and_survivors_continue(tmp_path: Path, recorder):
    """A killed agent's connections end at once: the coordinator's watch on its agent port (not its
    heartbeats' silence) has it probed, the refused probe loses it, and the survivors are told. How soon
    is bench/membership.py's ``kill_ms``; here, the cause and the order of events."""
    _, out, stop = recorder
    with recording(tmp_path, recorder, 3, TRAINPLANE_MIN_WORKERS="2") as job:
        after = whole_world(job, 3) + 1
        job.kill(2)
        assert wait_until(lambda: all_told(out, 2, after), timeout=15), job.log(0)
        told = told_of(out, after)
        assert all(e["removed"] == ["127.0.0.12"] for e in told)
        lines = job.log(0).splitlines()
        [loss] = [i for i, line in enumerate(lines) if f"generation {after}: 2 node(s)" in line]
        assert re.search(r"node 2 \(127\.0\.0\.12\): its agent (closed the watch's connection to its agent "
                         r"port|port refused a connection|port's connection was reset).*, and a direct probe failed",
                         lines[loss]), lines[loss]
        assert not any("node 2 (127.0.0.12) sent no heartbeat" in line for line in lines[:loss]), job.log(0)
        snapshot = job.members()
        assert snapshot["generation"] == after, job.log(0)
        assert [m["node_id"] for m in snapshot["members"] if m["node_rank"] is not None] == [0, 1]
        stop.touch()
        assert job.agents[0].wait(timeout=30) == 0


def test_when_the_coordinator_node_dies_the_lowest_survivor_takes_over_and_becomes_master(tmp_path: Path, recorder):
    _, out, stop = recorder
    with recording(tmp_path, recorder, 3, TRAINPLANE_MIN_WORKERS="2") as job:
        after = whole_world(job, 3) + 1
        job.kill(0)
        assert wait_until(lambda: all_told(out, 2, after), timeout=20), job.log(1)
        told = sorted(told_of(out, after), key=lambda e: e["rank"])
        assert [(e["rank"], e["world_size"], e["master"]) for e in told] == [("0", "2", "127.0.0.11"),
                                                                            ("1", "2", "127.0.0.11")]
        assert all(e["removed"] == ["127.0.0.10"] for e in told)
        snapshot = request_json("127.0.0.11", job.port, "GET", "/members", job.token, job=job.job)
        assert snapshot["generation"] == after and snapshot["status"] == "running", job.log(1)
        assert [m["node_id"] for m in snapshot["members"] if m["node_rank"] is not None] == [1, 2]
        assert "takes over" in job.log(1)
        stop.touch()
        assert job.agents[1].wait(timeout=30) == 0
        assert job.agents[2].wait(timeout=30) == 0


def test_a_dead_tree_parent_is_removed_and_its_children_stay(tmp_path: Path, recorder):
    # Threshold 4, width 2: node 0 hears nodes 1 and 4; node 1 aggregates nodes 2 and 3, node 4 nodes 5 and 6.
    _, out, stop = recorder
    with recording(tmp_path, recorder, 7, TRAINPLANE_MIN_WORKERS="2", TRAINPLANE_TREE_THRESHOLD="4",
                   TRAINPLANE_TREE_FANOUT="2") as job:
        after = whole_world(job, 7) + 1
        job.kill(1)
        assert wait_until(lambda: all_told(out, 6, after), timeout=20), job.log(0)

        def orphans_heard_again() -> bool:
            """Nodes 2 and 3, whose parent died, heard from since (re-parented or probed), not lost."""
            seen = {m["node_id"]: m["last_seen_s"] for m in job.members()["members"] if m["node_rank"] is not None}
            return all(seen.get(i) is not None and seen[i] < 1.5 for i in (2, 3))

        assert wait_until(orphans_heard_again, timeout=10), job.log(0)
        snapshot = job.members()
        assert snapshot["generation"] == after, job.log(0)
        assert [m["node_id"] for m in snapshot["members"] if m["node_rank"] is not None] == [0, 2, 3, 4, 5, 6]
        stop.touch()
        assert job.agents[0].wait(timeout=30) == 0


def test_sigstopped_agent_is_declared_dead_and_rejoins_cleanly_after_sigcont(tmp_path: Path, recorder):
    """How soon a silent node is dead is the coordinator's decision, tested on a fake clock
    (test_detection.py: probed 1.25 beat caps after its last beat, lost when the probe is not answered
    within the rest of two caps) and measured by bench/membership.py (``stop_ms``); here, that it
    happens and the node comes back."""
    stop = recorder[2]
    with recording(tmp_path, recorder, 3, TRAINPLANE_MIN_WORKERS="2") as job:
        after = whole_world(job, 3) + 1
        job.agents[1].send_signal(signal.SIGSTOP)
        assert wait_until(lambda: job.members()["generation"] == after, timeout=10), job.log(0)
        snapshot = job.members()
        assert [m["node_id"] for m in snapshot["members"] if m["node_rank"] is not None] == [0, 2]
        assert {m["node_id"]: m["state"] for m in snapshot["members"]}[1] == "dead"
        job.agents[1].send_signal(signal.SIGCONT)
        assert wait_until(lambda: job.members()["generation"] > after, timeout=15), job.log(0)
        assert wait_until(lambda: len([m for m in job.members()["members"] if m["node_rank"] is not None]) == 3,
                          timeout=15)
        snapshot = job.members()
        ids = [m["node_id"] for m in snapshot["members"]]
        assert ids == [0, 1, 2]
        assert [m["node_rank"] for m in snapshot["members"]] == [0, 1, 2]
        assert all(m["state"] == "running" for m in snapshot["members"])
        assert "registering again" in job.log(1)
        stop.touch()
        codes = job.wait(timeout=30)
        assert codes == {0: 0, 1: 0, 2: 0}


def test_a_late_node_is_admitted_and_the_world_grows(tmp_path: Path, recorder):
    _, out, stop = recorder
    with recording(tmp_path, recorder, 2, TRAINPLANE_MAX_WORKERS="3") as job:
        after = whole_world(job, 2) + 1
        job.add(2)
        assert wait_until(lambda: all_told(out, 2, after), timeout=15), job.log(0)
        told = told_of(out, after)
        assert all(e["added"] == ["127.0.0.12"] and e["world_size"] == "3" for e in told)
        assert wait_until(lambda: any(name.startswith("node-2-") for name in events(out)), timeout=15)
        assert [m["node_rank"] for m in job.members()["members"]] == [0, 1, 2]
        stop.touch()
        assert job.wait(timeout=30) == {0: 0, 1: 0, 2: 0}


def test_monitor_members_off_delivers_no_exception_but_polling_sees_the_change(tmp_path: Path, recorder):
    _, out, stop = recorder
    with recording(tmp_path, recorder, 2, "poll", TRAINPLANE_MAX_WORKERS="3",
                   TRAINPLANE_MONITOR_MEMBERS="false") as job:
        after = whole_world(job, 2) + 1
        job.add(2)
        assert wait_until(lambda: all_told(out, 2, after), timeout=15), job.log(0)
        assert {e["how"] for e in told_of(out, after)} == {"poll"}
        stop.touch()
        assert job.wait(timeout=30) == {0: 0, 1: 0, 2: 0}


def test_training_continues_while_the_heartbeat_endpoint_is_unreachable(tmp_path: Path):
    params = tmp_path / "params"
    entry = [str(ROOT / "examples/ddp_digits.py"), "--epochs", "10", "--params-out", str(params),
             "--checkpoint", str(tmp_path / "ckpt.pt")]
    job = AgentCluster(tmp_path, entry, workers=2, TRAINPLANE_NUM_PROC="2")
    try:
        assert wait_until(lambda: "generation 1" in job.log(1), timeout=30)
        job.agents[0].send_signal(signal.SIGSTOP)  # node 0's agent: the heartbeat endpoint
        assert wait_until(lambda: "heartbeat to" in job.log(1), timeout=10)
        assert wait_until(lambda: "unreachable" in job.log(1), timeout=10)
        job.agents[0].send_signal(signal.SIGCONT)
        assert job.wait(timeout=240) == {0: 0, 1: 0}
        ranks = [json.loads(p.read_text()) for p in sorted(params.glob("rank-*.json"))]
        assert len(ranks) == 4 and len({r["params"] for r in ranks}) == 1
        assert "the coordinator answers again" in job.log(1)
    finally:
        job.close()


def test_elastic_digits_survives_losing_a_node(tmp_path: Path):
    ckpt = tmp_path / "ckpt.pt"
    result = tmp_path / "result.json"
    proc_args = ["--workers", "3", "--num-proc", "1", "--min-workers", "2", "--master-port", "0",
                 "--job-name", f"elastic-{os.getpid()}", str(ROOT / "examples/elastic_digits.py"),
                 "--epochs", "12", "--checkpoint", str(ckpt), "--result", str(result)]
    launcher = subprocess.Popen([sys.executable, "-m", "runtime", "launch", *proc_args], cwd=ROOT, env=project_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(ckpt.exists, timeout=120)
        node2 = [p for p in processes_with(f"elastic-{os.getpid()}") if _node_of(p) == "2"]
        assert node2
        for pid in node2:
            os.kill(pid, signal.SIGKILL)
        out, err = launcher.communicate(timeout=240)
        assert launcher.returncode == 0, err[-3000:]
        final = json.loads(result.read_text())
        assert final["world_size"] == 2 and final["accuracy"] >= 0.90
        assert "WorkerMembershipChanged" in out or "membership changed" in out
        assert "generation 2: world size 2" in out
    finally:
        if launcher.poll() is None:
            launcher.kill()


def _node_of(pid: int) -> str:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return ""
    for item in env:
        if item.startswith(b"TRAINPLANE_NODE_RANK="):
            return item.split(b"=", 1)[1].decode()
    return ""
