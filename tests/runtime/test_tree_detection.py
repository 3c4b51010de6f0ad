"""A killed agent deep in a tree world is found at once by its tree parent, not by silence (issue 26, item 2).

Six real agents (``testbed.lightweight``: the production ``Agent`` with a spawner that runs no processes), one OS
process each, on their own loopback addresses, in a tree of width 2 from the first node on: node 5 beats to node 4,
which beats to the coordinator, so the coordinator does not watch node 5's agent port; its parent does. The TTL is
60 s, so silence cannot find node 5 within the test's wait: only its parent's watch can (the connection ends when
the process is killed; the parent passes the suspicion up with a beat sent at once; the coordinator probes node 5,
is refused, and forms a world without it).
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runtime.agent.errors import TransportError
from runtime.agent.net.transport import request_json
from runtime.agent.rendezvous.tree import layout
from testbed.agents import ROOT, project_env
from testbed.lightweight import lightweight_address
from tests.conftest import wait_until

pytestmark = pytest.mark.process

NODES = 6
WIDTH = 2
TOKEN = "tree-detection-token"
JOB = "tree-detection"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((lightweight_address(0), 0))
        return int(sock.getsockname()[1])


def test_a_killed_agent_below_a_tree_parent_is_lost_through_its_parents_watch(tmp_path: Path):
    tree = layout(NODES, width=WIDTH, threshold=1)
    victim = next(p for p in range(NODES) if tree.parent(p) not in (None, 0))
    parent = tree.parent(victim)
    port = free_port()
    settings = {
        "job_name": JOB, "token": TOKEN, "workers": NODES, "num_proc": 1, "entrypoint": ["none.py"],
        "agent_port": port, "coordinator_port": port, "quorum_timeout": 60.0, "distribution": "pytorch",
        "min_workers": 1, "tree_threshold": 1, "tree_fanout": WIDTH,
        "heartbeat_interval": 15.0, "heartbeat_ttl": 60.0,
    }
    log = tmp_path / "agents.log"
    hosts = [subprocess.Popen(
        [sys.executable, "-m", "testbed.lightweight", "host", "--first", str(node), "--count", "1",
         "--settings", json.dumps(settings)],
        cwd=ROOT, env=project_env(BENCH_AGENT_LOG=str(log)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    ) for node in range(NODES)]

    def members() -> dict[str, Any]:
        try:
            return request_json(lightweight_address(0), port, "GET", "/members", TOKEN, job=JOB, timeout=5.0)
        except TransportError:
            return {}

    try:
        assert wait_until(lambda: members().get("status") == "running" and all(
            m["node_rank"] == m["node_id"] for m in members()["members"]), timeout=60), "one world, node ids in order"
        hosts[victim].send_signal(signal.SIGKILL)
        hosts[victim].wait(timeout=10)
        assert wait_until(lambda: members().get("generation", 0) >= 2, timeout=30), log.read_text()
        snapshot = members()
        assert [m["node_id"] for m in snapshot["members"] if m["node_rank"] is not None] == [
            n for n in range(NODES) if n != victim]
        said = log.read_text()
        assert f"node {victim} (" in said and f"(seen by node {parent}, its tree parent or above)" in said, said
    finally:
        for host in hosts:
            host.kill()
            host.wait()
