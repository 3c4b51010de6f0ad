"""The port-forward relay's local side with a real local service job behind it, through a plain TCP
connector and through the ``kubernetes`` client's port-forward to a stand-in API server."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest
from kubernetes import config

from runtime.client import JobClient
from runtime.local.jobs import LocalJob, LocalJobSpec
from runtime.local.launch_plan import free_port
from runtime.workflow import ExistingCompute, fn
from runtime.workflow.portforward import Relay, pod_connector
from testbed import service_fns
from testbed.fake_apiserver import FakeApiServer
from testbed.jobs import serving

pytestmark = pytest.mark.process

FNS = "testbed.service_fns"


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalJob]:
    spec = LocalJobSpec(workers=2, num_proc=1, mode="service", master_port=0, grace_period=1.0,
                        log_dir=str(tmp_path_factory.mktemp("relay") / "logs"))
    with serving(spec, ready_timeout=120) as started:
        yield started


def tcp_connector(job: LocalJob):
    """Connect straight to the job's coordinator, as a port-forward connects to the pod's port."""
    return lambda: socket.create_connection((job.plan.addresses[0], job.plan.ports[0]), timeout=10)


def connect(url: str) -> socket.socket:
    parsed = urlparse(url)
    return socket.create_connection((parsed.hostname, parsed.port), timeout=10)


def ended_without_an_answer(connection: socket.socket) -> bool:
    """Whether the peer closed ``connection`` without sending anything (a close with our request still
    unread in its buffer arrives as a reset)."""
    try:
        return connection.recv(4096) == b""
    except ConnectionResetError:
        return True


def test_calls_through_the_relay_reach_the_job_concurrently_and_carry_large_bodies(job: LocalJob):
    with Relay(tcp_connector(job), describe="the coordinator") as relay:
        assert relay.url.startswith("http://127.0.0.1:")
        with fn(service_fns.whoami).to(ExistingCompute(relay.url, job.token)) as whoami:
            assert [r["rank"] for r in whoami()] == [0, 1]
        big = "x" * (3 * 1024 * 1024)
        answers: list[object] = []

        def call() -> None:
            with JobClient(relay.url, job.token) as client:
                answers.append(client.call(f"{FNS}:echo", big, timeout=60))

        threads = [threading.Thread(target=call) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert answers == [[{"rank": r, "args": [big], "kwargs": {}} for r in (0, 1)]] * 3
        assert relay.last_error is None


def test_closing_the_relay_closes_its_port_and_its_open_connections(job: LocalJob):
    relay = Relay(tcp_connector(job))
    open_connection = connect(relay.url)
    open_connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert b" 200 " in open_connection.recv(4096)

    relay.close()

    assert ended_without_an_answer(open_connection), "the relayed connection is closed"
    with pytest.raises(ConnectionRefusedError):
        connect(relay.url)


def test_a_connector_failure_closes_that_connection_and_is_kept_for_the_message():
    def refuse() -> socket.socket:
        raise OSError("no route to the cluster")

    with Relay(refuse, describe="pod trainer-0:32300 in default") as relay:
        client = connect(relay.url)
        client.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert ended_without_an_answer(client)
        client.close()
        assert relay.last_error == "port-forward to pod trainer-0:32300 in default failed: no route to the cluster"


@pytest.fixture
def api(job: LocalJob) -> Iterator[FakeApiServer]:
    closed_port = free_port("127.0.0.1")
    pods = {"trainer-0": (job.plan.addresses[0], job.plan.ports[0]), "broken-0": ("127.0.0.1", closed_port)}
    server = FakeApiServer(lambda namespace, pod, port: pods.get(pod) if namespace == "research" else None)
    try:
        yield server
    finally:
        server.close()


def test_the_kubernetes_clients_port_forward_carries_calls_to_the_pod(api: FakeApiServer, job: LocalJob,
                                                                       tmp_path: Path):
    client = config.new_client_from_config(config_file=str(api.kubeconfig(tmp_path / "kubeconfig")))

    relay = Relay(pod_connector(client, "research", "trainer-0", 32300))
    with relay, JobClient(relay.url, job.token) as calls:
        assert calls.call(f"{FNS}:rank", timeout=60) == [0, 1]
        big = "y" * (2 * 1024 * 1024 + 7)
        assert calls.call(f"{FNS}:echo", big, timeout=60)[1]["args"] == [big]

    assert {path for path, _ in api.requests} == {"/api/v1/namespaces/research/pods/trainer-0/portforward?ports=32300"}
    assert {auth for _, auth in api.requests} == {f"Bearer {api.token}"}, "the kubeconfig's credentials are sent"


@pytest.mark.parametrize(("pod", "error"), [
    ("missing-0", 'failed: the API server refused the port-forward to pod missing-0 in research: Handshake status '
                  '404 pods "missing-0" not found'),
    ("broken-0", "ended: error forwarding port 32300 to pod broken-0, uid : [Errno 111] Connection refused"),
])
def test_the_port_forwards_failures_reach_the_relays_message(api: FakeApiServer, tmp_path: Path, pod: str,
                                                             error: str):
    client = config.new_client_from_config(config_file=str(api.kubeconfig(tmp_path / "kubeconfig")))

    with Relay(pod_connector(client, "research", pod, 32300), describe=f"pod {pod}:32300 in research") as relay:
        connection = connect(relay.url)
        connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert ended_without_an_answer(connection)
        connection.close()
        assert relay.last_error == f"port-forward to pod {pod}:32300 in research {error}"
