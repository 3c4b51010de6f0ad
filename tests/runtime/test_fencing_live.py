"""One world at a time with real agents on separate hosts (issue 20, item 5).

Three agents of an elastic job (min 2) run in three network namespaces joined by one bridge
(``tests.netns.bridged``), their ranks bench/recorder.py. A node's agent is stopped (``SIGSTOP``)
or its link taken down for 1x to 5x the heartbeat TTL (3 s), node 0 included, then let go. Whatever
happened meanwhile (a takeover by a majority's votes, a fenced-out coordinator), afterwards exactly
one node coordinates, every node holds that coordinator's world, the job ends ``succeeded`` with
every agent exiting 0, and nothing is left running.
"""

from __future__ import annotations

import json
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import pytest

from runtime.agent import contract
from runtime.agent.errors import TransportError
from runtime.agent.net.transport import request_json
from tests.conftest import ROOT, processes_with, project_env, wait_until
from tests.netns import bridged, cut, heal

pytestmark = pytest.mark.process

TTL = 3.0
PORT = 32420
RECORDER = ROOT / "bench" / "recorder.py"


class Hosts:
    """Three agents, one per namespace, and the controls a test needs."""

    def __init__(self, tmp_path: Path, hosts: list[tuple[str, str, str]]) -> None:
        self.hosts = hosts
        self.job, self.token = f"fence-{secrets.token_hex(4)}", secrets.token_urlsafe(16)
        self.out, self.stop = tmp_path / "events", tmp_path / "stop"
        self.out.mkdir()
        self.logs = [tmp_path / f"agent-{i}.log" for i in range(len(hosts))]
        common = {
            contract.JOB_NAME: self.job, contract.TOKEN: self.token, contract.WORKERS: str(len(hosts)),
            contract.NUM_PROC: "1", contract.ENTRYPOINT: json.dumps([str(RECORDER), str(self.out), str(self.stop)]),
            contract.AGENT_PORT_SETTING: str(PORT), contract.COORDINATOR_HOST: f"{hosts[0][1]}:{PORT}",
            contract.MASTER_PORT: "29500", contract.GRACE_PERIOD: "2", contract.MIN_WORKERS: "2",
            contract.QUORUM_TIMEOUT: "60", contract.HEARTBEAT_TTL: str(TTL),
            contract.RUN_ROOT: str(tmp_path / "run"),
        }
        self.agents = []
        for i, (namespace, address, _link) in enumerate(hosts):
            env = project_env(**common, **{contract.NODE_RANK_SETTING: str(i), contract.ADVERTISE_ADDRESS: address})
            with open(self.logs[i], "w") as log:
                self.agents.append(subprocess.Popen(
                    ["ip", "netns", "exec", namespace, sys.executable, "-m", contract.AGENT_MODULE], cwd=ROOT,
                    env=env, stdout=log, stderr=subprocess.STDOUT))

    def info(self, i: int) -> Optional[dict[str, Any]]:
        """Node ``i``'s ``GET /info``, or ``None`` when it does not answer."""
        try:
            return request_json(self.hosts[i][1], PORT, "GET", contract.ROUTE_INFO, self.token, job=self.job,
                                timeout=1.0)
        except (TransportError, OSError):
            return None

    def one_world(self) -> bool:
        """Exactly one node coordinates, its world has every node running, and every node holds it."""
        infos = [self.info(i) for i in range(len(self.hosts))]
        if any(i is None or i["status"] != "running" for i in infos):
            return False
        holders = [i for i, info in enumerate(infos) if info and info["coordinator"]]
        if len(holders) != 1:
            return False
        members = request_json(self.hosts[holders[0]][1], PORT, "GET", contract.ROUTE_MEMBERS, self.token,
                               job=self.job, timeout=1.0)
        running = [m for m in members["members"] if m["node_rank"] is not None and m["state"] == "running"]
        worlds = {(info["generation"], info["epoch"], tuple(info["world_coordinator"])) for info in infos if info}
        return len(running) == len(self.hosts) and len(worlds) == 1

    def log(self) -> str:
        return "\n".join(f"--- node {i}\n{p.read_text()}" for i, p in enumerate(self.logs))

    def close(self) -> None:
        for agent in self.agents:
            if agent.poll() is None:
                agent.send_signal(signal.SIGCONT)
                agent.kill()
                agent.wait()


@pytest.fixture
def job(tmp_path: Path) -> Iterator[Hosts]:
    with bridged(3) as hosts:
        started = Hosts(tmp_path, hosts)
        try:
            yield started
        finally:
            started.close()


def fault_lasts(seconds: float) -> None:
    """The fault's length: the experiment's input, not a wait for an outcome."""
    time.sleep(seconds)


@pytest.mark.parametrize(("fault", "node", "ttls"), [
    ("stop", 0, 1), ("stop", 0, 3), ("stop", 0, 5), ("stop", 1, 3), ("stop", 2, 2),
    ("cut", 0, 3), ("cut", 1, 3), ("cut", 2, 4),
])
def test_after_a_stall_or_a_cut_exactly_one_world_goes_on_and_the_job_succeeds(job: Hosts, fault: str, node: int,
                                                                               ttls: float):
    assert wait_until(job.one_world, timeout=90), job.log()
    if fault == "stop":
        job.agents[node].send_signal(signal.SIGSTOP)
    else:
        cut(job.hosts[node][2])
    fault_lasts(ttls * TTL)
    if fault == "stop":
        job.agents[node].send_signal(signal.SIGCONT)
    else:
        heal(job.hosts[node][2])
    assert wait_until(job.one_world, timeout=90), job.log()
    if fault == "stop" and node == 0 and ttls >= 3:
        assert "node 1 takes over in epoch 2" in job.log() and "fenced out" in job.logs[0].read_text(), job.log()
    job.stop.touch()
    codes = [agent.wait(timeout=90) for agent in job.agents]
    assert codes == [0, 0, 0], job.log()
    assert "exiting 121" not in job.log() and "job failed" not in job.log()
    assert wait_until(lambda: not processes_with(job.job), timeout=30), processes_with(job.job)
