"""A coordinator's threads do not grow with its peers (issue 26, item 1), measured on a real coordinator ``Agent``.

The coordinator (the production ``Agent`` with a spawner that runs no processes, ``testbed.lightweight``) runs in
this test's process; its peers are lightweight agents in another process, in a flat world (every peer beats to
the coordinator directly, keeps its connection alive, and is watched on its agent port). With 2 peers and with
200, once the world runs and every peer has been heard, the coordinator's own threads are counted, by name: its
server's loop does every connection's I/O, so the count is the same. ``tests/runtime/agent/net/test_loop.py`` pins
the same of a bare server with raw sockets.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
from collections import Counter
from typing import Any

import pytest

from runtime.agent.agent import Agent
from runtime.agent.errors import TransportError
from runtime.agent.net.transport import request_json
from testbed.agents import ROOT, project_env
from testbed.lightweight import NullProcesses, lightweight_address
from testbed.settings import agent_settings
from tests.conftest import wait_until

pytestmark = pytest.mark.process

TOKEN = "coordinator-threads-token"
JOB = "coordinator-threads"
SETTLED_CHECKS = 5


def coordinator_threads(peers: int) -> Counter[str]:
    """How many threads of each name a coordinator of ``peers`` peers adds to this process, sampled
    :data:`SETTLED_CHECKS` times once its world runs, every peer was heard within the last second and no world
    push is in flight (the most of each name in any sample: any other thread caught in any sample counts)."""
    with socket.socket() as sock:
        sock.bind((lightweight_address(0), 0))
        port = int(sock.getsockname()[1])
    shared: dict[str, Any] = {
        "job_name": JOB, "token": TOKEN, "workers": peers + 1, "num_proc": 1, "entrypoint": ["none.py"],
        "agent_port": port, "coordinator_port": port, "quorum_timeout": 60.0, "distribution": "pytorch",
        "min_workers": 1, "tree_threshold": 1000, "heartbeat_interval": 0.25, "heartbeat_ttl": 2.0,
    }
    before = set(threading.enumerate())
    agent = Agent(agent_settings(**shared, node_id=0, advertise_address=lightweight_address(0),
                                 bind_address=lightweight_address(0), coordinator=lightweight_address(0)),
                  log=open("/dev/null", "w"), spawner=NullProcesses)  # noqa: SIM115 - the agent's for its life
    runner = threading.Thread(target=agent.run, name="coordinator-run", daemon=True)
    runner.start()
    host = subprocess.Popen(
        [sys.executable, "-m", "testbed.lightweight", "host", "--first", "1", "--count", str(peers),
         "--settings", json.dumps(shared)],
        cwd=ROOT, env=project_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def settled() -> bool:
        try:
            snapshot = request_json(lightweight_address(0), port, "GET", "/members", TOKEN, job=JOB, timeout=5.0)
        except TransportError:
            return False
        seen = [m["last_seen_s"] for m in snapshot["members"]]
        return snapshot["status"] == "running" and len(seen) == peers + 1 and max(seen) < 1.0

    def added() -> Counter[str]:
        return Counter(t.name for t in set(threading.enumerate()) - before if t.is_alive())

    try:
        assert wait_until(settled, timeout=120), f"{peers} peers did not settle into one world"
        names: Counter[str] = Counter()
        for _ in range(SETTLED_CHECKS):  # a push in flight has a thread while its batch runs: not a steady state
            assert wait_until(lambda: "push" not in added(), timeout=30), "the world's push ended"
            names |= added()
            assert wait_until(settled, timeout=10)
        return names
    finally:
        host.kill()
        host.wait()
        agent.send_signal(signal.SIGTERM)
        runner.join(timeout=30)


def test_a_coordinator_with_two_hundred_kept_alive_peers_has_no_more_threads_than_with_two():
    few = coordinator_threads(2)
    many = coordinator_threads(200)
    assert few["agent-http"] == 1 and few["heartbeat"] == 1, few
    assert sum(many.values()) <= sum(few.values()) and set(many) <= set(few), (few, many)
