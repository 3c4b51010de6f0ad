"""The agent as a pod runs it: standard library only, bearer-token auth on every route but /healthz."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.agent import contract
from runtime.agent.errors import TransportError, Unauthorized
from runtime.agent.net.transport import request_json
from runtime.local.launch_plan import free_port
from tests.conftest import ROOT, project_env, wait_until

pytestmark = pytest.mark.process

TOKEN = "s3cret-token"
JOB = "isolated"


def agent_env(port: int, script: Path, workers: int = 1, **extra: str) -> dict[str, str]:
    """Settings of a coordinator agent on 127.0.0.1:port."""
    return {
        contract.JOB_NAME: JOB, contract.TOKEN: TOKEN, contract.NODE_RANK_SETTING: "0",
        contract.WORKERS: str(workers), contract.NUM_PROC: "2", contract.ENTRYPOINT: json.dumps([str(script)]),
        contract.COORDINATOR_HOST: f"127.0.0.1:{port}", contract.AGENT_PORT_SETTING: str(port),
        contract.ADVERTISE_ADDRESS: "127.0.0.1", contract.MASTER_PORT: str(free_port("127.0.0.1", [port])),
        **extra,
    }


def test_agent_imports_and_runs_without_site_packages(tmp_path: Path):
    script = tmp_path / "job.py"
    script.write_text("import os\nprint('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'])\n")
    port = free_port("127.0.0.1")
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "from runtime.agent.__main__ import main; "
        "assert not any('site-packages' in p for p in sys.path); "
        "assert 'httpx' not in sys.modules; sys.exit(main())"
    )
    env = {"PATH": "/usr/bin:/bin", **agent_env(port, script)}
    result = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(ROOT)], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == ["[rank 0] rank 0 of 2", "[rank 1] rank 1 of 2"]


def test_runtime_and_its_exceptions_import_without_site_packages():
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "import runtime, runtime.agent, runtime.local.jobs, runtime.local.launch, runtime.agent.service.worker; "
        "from runtime.agent import errors; "
        "assert runtime.WorkerMembershipChanged is errors.WorkerMembershipChanged; "
        "assert runtime.RemoteError is errors.RemoteError and runtime.CallTimeout is errors.CallTimeout; "
        "assert 'httpx' not in sys.modules; print('ok')"
    )
    result = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(ROOT)], env={"PATH": "/usr/bin:/bin"},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"


@pytest.fixture
def waiting_agent(waiting_agent_process: tuple[int, int]) -> int:
    """The port of a coordinator of a 2-node job that waits for a node that never comes."""
    return waiting_agent_process[0]


@pytest.fixture
def waiting_agent_process(tmp_path: Path):
    """``(port, pid)`` of a coordinator of a 2-node job that waits for a node that never comes."""
    script = tmp_path / "job.py"
    script.write_text("pass\n")
    port = free_port("127.0.0.1")
    proc = subprocess.Popen([sys.executable, "-m", "runtime.agent"],
                            env=project_env(**agent_env(port, script, workers=2, TRAINPLANE_QUORUM_TIMEOUT="60")),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def healthy() -> bool:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", contract.ROUTE_HEALTHZ)
            return conn.getresponse().status == 200
        except OSError:
            return False

    assert wait_until(healthy, timeout=20)
    yield port, proc.pid
    proc.terminate()
    proc.wait(timeout=20)


def test_a_coordinator_with_200_kept_alive_peers_has_no_more_threads_than_with_2(
        waiting_agent_process: tuple[int, int]):
    """Each peer's connection is kept alive after its request (as heartbeats keep theirs): the
    agent's server serves them all from its one loop, not a thread each."""
    port, pid = waiting_agent_process

    def peers(count: int) -> list[http.client.HTTPConnection]:
        connections = []
        for _ in range(count):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("GET", contract.ROUTE_MEMBERS, headers={"Authorization": f"Bearer {TOKEN}"})
            response = conn.getresponse()
            assert response.status == 200 and json.loads(response.read())["workers"] == 2
            connections.append(conn)
        return connections

    def threads() -> int:
        return len(os.listdir(f"/proc/{pid}/task"))

    few = peers(2)
    with_two = threads()
    many = peers(200)
    assert threads() <= with_two
    info = request_json("127.0.0.1", port, "GET", "/info", TOKEN, job=JOB)
    assert info["requests_served"] >= 202
    for conn in few + many:
        conn.close()


@pytest.mark.parametrize("token", [None, "wrong-token", TOKEN[:-1], ""])
def test_requests_without_the_job_token_are_refused(waiting_agent: int, token):
    conn = http.client.HTTPConnection("127.0.0.1", waiting_agent, timeout=5)
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    for method, path in (("GET", "/info"), ("GET", "/members"), ("PUT", "/members"), ("POST", "/world"),
                         ("POST", "/probe")):
        conn.request(method, path, body=b"{}" if method != "GET" else None, headers=headers)
        response = conn.getresponse()
        response.read()
        assert response.status == 401, (method, path)
    with pytest.raises(Unauthorized):
        request_json("127.0.0.1", waiting_agent, "GET", "/info", "nope", job=JOB)


def test_the_job_token_is_accepted(waiting_agent: int):
    info = request_json("127.0.0.1", waiting_agent, "GET", "/info", TOKEN, job=JOB)
    assert info["job"] == "isolated" and info["node_id"] == 0 and info["status"] == "forming"
    members = request_json("127.0.0.1", waiting_agent, "GET", "/members", TOKEN, job=JOB)
    assert members["registered"] == [0] and members["workers"] == 2


def test_a_probe_is_decided_by_the_agents_loop(waiting_agent: int):
    """``POST /probe`` goes through the agent's loop, where ``Member`` decides it in order with the
    ballots (``election.Election.confirm``), and comes back decided, with the epoch this node knows."""
    probe = {"prober": 1, "epoch": 1, "within": 5.0}
    answer = request_json("127.0.0.1", waiting_agent, "POST", contract.ROUTE_PROBE, TOKEN, probe, job=JOB)
    assert answer == {"epoch": 0, "decided": True, "world_coordinator": None}, "no world yet: epoch 0"
    with pytest.raises(TransportError, match="bad probe") as info:
        request_json("127.0.0.1", waiting_agent, "POST", contract.ROUTE_PROBE, TOKEN, {"prober": 1}, job=JOB)
    assert info.value.status == 400


@pytest.mark.parametrize(("body", "status"), [(b"{not json", 400), (b"[1, 2]", 400)])
def test_malformed_bodies_get_400(waiting_agent: int, body: bytes, status: int):
    conn = http.client.HTTPConnection("127.0.0.1", waiting_agent, timeout=10)
    conn.request("PUT", "/members", body=body, headers={"Authorization": f"Bearer {TOKEN}"})
    response = conn.getresponse()
    assert response.status == status
    assert "error" in json.loads(response.read())


def test_oversized_body_gets_413_before_it_is_read(waiting_agent: int):
    with socket.create_connection(("127.0.0.1", waiting_agent), timeout=10) as sock:
        sock.sendall(
            f"PUT /members HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Content-Length: {contract.MAX_BODY_BYTES + 1}\r\n\r\n{{".encode()
        )
        status_line = sock.makefile("rb").readline()
    assert status_line.split()[1] == b"413"


def test_registration_of_a_node_outside_the_job_is_rejected(waiting_agent: int):
    body = {"node_id": 5, "addr": "127.0.0.1", "port": 1, "num_proc": 1, "state": "joining"}
    with pytest.raises(Exception, match="outside this job") as info:
        request_json("127.0.0.1", waiting_agent, "PUT", "/members", TOKEN, body, job=JOB)
    assert info.value.status == 400


def test_a_batch_mode_agent_refuses_calls_naming_the_setting(waiting_agent: int):
    for path in ("/call", "/exec"):
        with pytest.raises(TransportError, match="runs in batch mode") as info:
            request_json("127.0.0.1", waiting_agent, "POST", path, TOKEN, {"fn": "os:getpid"}, job=JOB)
        assert info.value.status == 409
        assert contract.MODE in str(info.value)


def test_a_tree_parent_without_the_world_yet_keeps_a_childs_heartbeat(tmp_path: Path):
    """World pushes race: a child may beat to its parent before the parent has the world.

    The parent must keep the beat (and send no stale world back) instead of answering 409, which
    would tell the child that it had been removed from the job.
    """
    script = tmp_path / "job.py"
    script.write_text("pass\n")
    coordinator_port = free_port("127.0.0.1")
    parent_port = free_port("127.0.0.1", [coordinator_port])
    env = agent_env(coordinator_port, script, workers=3, TRAINPLANE_QUORUM_TIMEOUT="60")
    coordinator = subprocess.Popen([sys.executable, "-m", "runtime.agent"], env=project_env(**env),
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    parent_env = {**env, contract.NODE_RANK_SETTING: "1", contract.AGENT_PORT_SETTING: str(parent_port)}
    parent = subprocess.Popen([sys.executable, "-m", "runtime.agent"], env=project_env(**parent_env),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def parent_registered() -> bool:
            try:
                return 1 in request_json("127.0.0.1", coordinator_port, "GET", "/members", TOKEN, job=JOB)["registered"]
            except TransportError:
                return False

        assert wait_until(parent_registered, timeout=30)
        beat = {"node_id": 2, "addr": "127.0.0.1", "port": 1, "num_proc": 2, "state": "alive",
                "generation": 1, "ages": {}}
        reply = request_json("127.0.0.1", parent_port, "PUT", "/members", TOKEN, beat, job=JOB)
        assert reply == {"generation": 0}
    finally:
        for proc in (parent, coordinator):
            proc.terminate()
            proc.wait(timeout=20)
