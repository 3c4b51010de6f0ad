"""One world at a time with real agents on separate hosts (issue 20, item 5).

Three agents of an elastic job (min 2) run in three network namespaces joined by one bridge
(``tests.netns.bridged``), their ranks bench/recorder.py. A node's agent is stopped (``SIGSTOP``)
or its link taken down for 1x to 5x the heartbeat TTL (3 s), node 0 included, then let go. Whatever
happened meanwhile (a takeover by a majority's votes, a fenced-out coordinator), afterwards exactly
one node coordinates, every node holds that coordinator's world, the job ends ``succeeded`` with
every agent exiting 0, and nothing is left running.

The same three hosts in service mode, calls arriving all along: no call answers from an older world
once a newer one has answered, and after the heal calls answer from the one world every node holds.
"""

from __future__ import annotations

import json
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import pytest

from runtime.agent import contract
from runtime.agent.errors import CallError, TrainplaneError, TransportError, WorkerMembershipChanged
from runtime.agent.net.transport import request_json
from runtime.client import JobClient
from testbed import service_fns
from tests.conftest import ROOT, fault_lasts, processes_with, project_env, wait_until
from tests.netns import bridged, cut, heal

pytestmark = pytest.mark.process

TTL = 3.0
PORT = 32420
RECORDER = ROOT / "bench" / "recorder.py"


class Hosts:
    """Three agents, one per namespace, and the controls a test needs."""

    def __init__(self, tmp_path: Path, hosts: list[tuple[str, str, str]], mode: str = "batch") -> None:
        self.hosts = hosts
        self.job, self.token = f"fence-{secrets.token_hex(4)}", secrets.token_urlsafe(16)
        self.out, self.stop = tmp_path / "events", tmp_path / "stop"
        self.out.mkdir()
        self.logs = [tmp_path / f"agent-{i}.log" for i in range(len(hosts))]
        common = {
            contract.JOB_NAME: self.job, contract.TOKEN: self.token, contract.WORKERS: str(len(hosts)),
            contract.NUM_PROC: "1", contract.MODE: mode,
            contract.AGENT_PORT_SETTING: str(PORT), contract.COORDINATOR_HOST: f"{hosts[0][1]}:{PORT}",
            contract.MASTER_PORT: "29500", contract.GRACE_PERIOD: "2", contract.MIN_WORKERS: "2",
            contract.QUORUM_TIMEOUT: "60", contract.HEARTBEAT_TTL: str(TTL),
            contract.RUN_ROOT: str(tmp_path / "run"),
        }
        if mode == "batch":
            common[contract.ENTRYPOINT] = json.dumps([str(RECORDER), str(self.out), str(self.stop)])
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

    def url_of_rank_0(self) -> Optional[str]:
        """The base URL of the agent at node rank 0 of the coordinator's world (where calls go), or ``None``."""
        holders = [i for i in range(len(self.hosts)) if (self.info(i) or {}).get("coordinator")]
        if len(holders) != 1:
            return None
        members = request_json(self.hosts[holders[0]][1], PORT, "GET", contract.ROUTE_MEMBERS, self.token,
                               job=self.job, timeout=1.0)
        first = [m for m in members["members"] if m["node_rank"] == 0]
        return f"http://{first[0]['addr']}:{first[0]['port']}" if first else None

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


FNS = service_fns.__name__
REACHED = [contract.TRAINPLANE_GENERATION, "NODE_RANK", "RANK", "WORLD_SIZE"]
"""What each rank tells a call: the world its process is in."""
ANSWERED = (CallError, WorkerMembershipChanged, TransportError)
"""What a call to a job in the middle of a fault may raise instead of returning."""


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Hosts]:
    with bridged(3) as hosts:
        started = Hosts(tmp_path, hosts, mode="service")
        try:
            yield started
        finally:
            started.close()


class Calls:
    """Calls to each of ``urls`` (node 0's agent, node 1's), one after another from a thread per URL
    until :meth:`close`; every call's start and end (monotonic seconds) and answer (its ranks' reports,
    or the error raised) noted. A node that is not its world's node rank 0 refuses calls (409)."""

    def __init__(self, urls: list[str], token: str) -> None:
        self.answers: list[tuple[float, float, object]] = []
        self._done = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(url, token), name=f"calls-{url}", daemon=True)
                         for url in urls]
        for thread in self._threads:
            thread.start()

    def _run(self, url: str, token: str) -> None:
        with JobClient(url, token) as client:
            while not self._done.is_set():
                start = time.monotonic()
                answer: object
                try:
                    answer = client.call(f"{FNS}:environment", REACHED, timeout=5.0)
                except ANSWERED as exc:
                    answer = exc
                self.answers.append((start, time.monotonic(), answer))
                self._done.wait(0.1)

    def returned(self) -> list[tuple[float, float, list[dict[str, str]]]]:
        """The calls that returned: ``(start, end, ranks' reports)``."""
        return [(start, end, a) for start, end, a in self.answers if isinstance(a, list)]

    def close(self) -> None:
        self._done.set()
        for thread in self._threads:
            thread.join(timeout=30)


def one_world_answers(answer: list[dict[str, str]]) -> bool:
    """Whether a call's ranks all report one world: one generation, ranks ``0..n-1`` of ``WORLD_SIZE`` ``n``."""
    sizes = {int(r["WORLD_SIZE"]) for r in answer}
    return (len({r[contract.TRAINPLANE_GENERATION] for r in answer}) == 1 and sizes == {len(answer)}
            and [int(r["RANK"]) for r in answer] == list(range(len(answer))))


def split(returned: list[tuple[float, float, list[dict[str, str]]]]) -> list[tuple[int, int]]:
    """Pairs of generations ``(older, newer)`` where a call answered in the older world started after
    a call answered in the newer one had returned: two worlds serving at once."""
    generation = [int(a[0][contract.TRAINPLANE_GENERATION]) for _, _, a in returned]
    return [(generation[i], generation[j]) for i, (start, _, _) in enumerate(returned)
            for j, (_, end, _) in enumerate(returned) if generation[i] < generation[j] and start > end]


class HeldCall:
    """A call holding every rank of the job (``mark_then_wait``) from a thread, until ``gate`` exists."""

    def __init__(self, url: str, token: str, tmp_path: Path, ranks: int) -> None:
        self.gate, self._prefix, self._ranks = tmp_path / "gate", str(tmp_path / "started"), ranks
        self.answer: list[object] = []
        self._thread = threading.Thread(target=self._run, args=(url, token), name="held-call")
        self._thread.start()

    def _run(self, url: str, token: str) -> None:
        with JobClient(url, token) as client:
            try:
                self.answer.append(client.call(f"{FNS}:mark_then_wait", self._prefix, str(self.gate), timeout=60.0))
            except TrainplaneError as exc:
                self.answer.append(exc)

    def running(self) -> bool:
        """Whether the call runs on every rank."""
        return all(Path(f"{self._prefix}-{r}").exists() for r in range(self._ranks))

    def end(self, timeout: float) -> Optional[object]:
        """Wait up to ``timeout`` seconds for the call to end (without opening the gate): its answer, or ``None``."""
        self._thread.join(timeout=timeout)
        return self.answer[0] if self.answer else None

    def release(self) -> None:
        self.gate.touch()
        self._thread.join(timeout=60)


def answer_from_rank_0(job: Hosts) -> list[dict[str, str]]:
    """A call to the agent at the world's node rank 0, once one returns (the world may still be settling)."""
    url = job.url_of_rank_0()
    assert url is not None, job.log()
    answers: list[list[dict[str, str]]] = []

    def answered() -> bool:
        with JobClient(url, job.token) as client:
            try:
                answers.append(client.call(f"{FNS}:environment", REACHED, timeout=10.0))
            except ANSWERED:
                return False
        return True

    assert wait_until(answered, timeout=30, interval=0.5), job.log()
    return answers[-1]


def fault(job: Hosts, kind: str, node: int, seconds: float) -> None:
    """Stop node ``node``'s agent (``stop``) or cut its link (``cut``) for ``seconds``, then let it go."""
    if kind == "stop":
        job.agents[node].send_signal(signal.SIGSTOP)
    else:
        cut(job.hosts[node][2])
    fault_lasts(seconds)
    if kind == "stop":
        job.agents[node].send_signal(signal.SIGCONT)
    else:
        heal(job.hosts[node][2])


@pytest.mark.parametrize(("kind", "node"), [("stop", 0), ("cut", 1)])
def test_service_calls_during_a_stall_or_a_cut_answer_from_one_world(service: Hosts, kind: str, node: int,
                                                                     tmp_path: Path):
    """Service mode, 3 nodes, elastic (min 2), calls arriving all along at node 0's and node 1's agents:
    node 0's agent stopped or node 1's link cut for 3 TTLs, with a call in flight on every rank when
    it starts. The call in flight fails (its world changed under it) instead of hanging; every call
    that returns has its ranks in one world, and no call answers from an older world once a newer
    one has answered; after the heal a call to the world's node rank 0 reaches all three nodes in
    the world every node holds. Stopping every agent (SIGTERM, as ``LocalJob.stop`` and a deleted
    StatefulSet do) ends each with 143 and no verdict of failure, nothing left running."""
    assert wait_until(service.one_world, timeout=90), service.log()
    urls = [f"http://{address}:{PORT}" for _, address, _ in service.hosts[:2]]
    held = HeldCall(urls[0], service.token, tmp_path, 3)
    calls: Optional[Calls] = None
    try:
        assert wait_until(held.running, timeout=60), service.log()
        calls = Calls(urls, service.token)
        fault(service, kind, node, 3 * TTL)
        ended = held.end(timeout=60)
        assert isinstance(ended, (CallError, WorkerMembershipChanged)), (ended, service.log())
        assert wait_until(service.one_world, timeout=90), service.log()
        after = answer_from_rank_0(service)
    finally:
        held.release()
        if calls is not None:
            calls.close()
    generations = {info["generation"] for info in (service.info(i) for i in range(3)) if info}
    assert one_world_answers(after) and len(after) == 3, after
    assert {int(r[contract.TRAINPLANE_GENERATION]) for r in after} == generations, (after, generations)
    returned = calls.returned()
    mixed = [(start, end, a) for start, end, a in returned if not one_world_answers(a)]
    assert mixed == [], (mixed, service.log())
    assert not split(returned), (split(returned), service.log())
    if kind == "stop":
        assert "fenced out" in service.logs[0].read_text(), service.log()
    for agent in service.agents:
        agent.send_signal(signal.SIGTERM)
    codes = [agent.wait(timeout=90) for agent in service.agents]
    assert codes == [contract.EXIT_INTERRUPTED_BASE + signal.SIGTERM] * 3, (codes, service.log())
    assert "exiting 121" not in service.log() and "job failed" not in service.log()
    assert wait_until(lambda: not processes_with(service.job), timeout=30), processes_with(service.job)
