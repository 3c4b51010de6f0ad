"""JobClient: typed exceptions rebuilt from the wire, results in order, arguments checked locally."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from runtime import (
    CallCancelled,
    CallTimeout,
    JobEnded,
    NodeFailed,
    RemoteError,
    TransportError,
    Unauthorized,
    WorkerMembershipChanged,
)
from runtime.agent.spec.wire import error_body, error_status, pack_result
from runtime.client import JobClient

pytestmark = pytest.mark.unit

TOKEN = "client-test-token"


def client_answering(status: int, body: dict, seen: list | None = None) -> JobClient:
    """A client whose coordinator always answers ``status`` with ``body``; requests go to ``seen``."""

    def handle(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        return httpx.Response(status, json=body)

    return JobClient("http://coordinator:1", TOKEN, transport=httpx.MockTransport(handle))


@pytest.mark.parametrize(
    "error",
    [
        RemoteError(3, 1, "ZeroDivisionError", "division by zero", "Traceback ...", "m:f"),
        CallTimeout(1.0, [2, 3], "m:f"),
        WorkerMembershipChanged(["10.0.0.5"], [], ["10.0.0.1"], ["10.0.0.1", "10.0.0.5"], 2),
        NodeFailed(2, "10.0.0.3:32300", "connection refused"),
        CallCancelled("cancelled"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_errors_are_rebuilt_as_their_types(error):
    client = client_answering(error_status(error), error_body(error))
    with pytest.raises(type(error)) as info:
        client.call("m:f", 1, timeout=5)
    assert vars(info.value) == vars(error)


def test_401_is_unauthorized_and_other_refusals_keep_their_status():
    with pytest.raises(Unauthorized):
        client_answering(401, {"error": "missing or wrong bearer token"}).call("m:f")
    with pytest.raises(TransportError, match="415 pickle is not enabled") as info:
        client_answering(415, {"error": "pickle is not enabled"}).call("m:f")
    assert info.value.status == 415 and not isinstance(info.value, Unauthorized)


def test_the_request_carries_token_function_arguments_deadline_and_subset():
    seen: list[httpx.Request] = []
    client = client_answering(200, {"ranks": [0, 1], "results": ["a", "b"]}, seen)
    assert client.call("pkg.mod:fn", 1, [2], timeout=7.5, node_ranks=[1, 0], lr=0.1) == ["a", "b"]
    request = seen[0]
    assert request.url.path == "/call"
    assert request.headers["Authorization"] == f"Bearer {TOKEN}"
    assert json.loads(request.content) == {"fn": "pkg.mod:fn", "serialization": "json", "timeout": 7.5,
                                           "workers": [1, 0], "args": [1, [2]], "kwargs": {"lr": 0.1}}


def test_pickle_results_are_unpickled():
    client = JobClient("http://c:1", TOKEN, serialization="pickle", transport=httpx.MockTransport(
        lambda _r: httpx.Response(200, json={"ranks": [0], "results": [pack_result({1, 2}, "pickle")],
                                             "serialization": "pickle"})))
    assert client.call("m:f", {3}) == [{1, 2}]


def test_arguments_json_cannot_carry_fail_before_sending():
    seen: list[httpx.Request] = []
    with pytest.raises(TypeError, match="not JSON-serialisable"):
        client_answering(200, {}, seen).call("m:f", {1, 2})
    assert not seen


def test_no_coordinator_is_a_transport_error_without_status():
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(TransportError, match="connection refused") as info:
        JobClient("http://c:1", TOKEN, transport=httpx.MockTransport(refuse)).info()
    assert info.value.status is None


def test_a_coordinator_that_never_answers_is_a_call_timeout_without_ranks():
    def hang(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    with pytest.raises(CallTimeout, match="did not answer") as info:
        JobClient("http://c:1", TOKEN, transport=httpx.MockTransport(hang)).call("m:f", timeout=1)
    assert info.value.pending_ranks == ()


def test_info_members_and_connection_file(tmp_path: Path):
    views = {
        "/info": {"job": "j", "node_id": 0, "node_rank": 0, "addr": "127.0.0.2", "num_proc": 2, "generation": 1,
                  "status": "running", "mode": "service"},
        "/members": {"job": "j", "generation": 1, "status": "running",
                     "members": [{"node_id": 0, "addr": "127.0.0.2", "port": 5, "num_proc": 2, "state": "running",
                                  "last_seen": 0.1}]},
    }
    path = tmp_path / "connection.json"
    path.write_text(json.dumps({"url": "http://c:1", "token": TOKEN, "job": "j"}))
    with JobClient.from_file(path, transport=httpx.MockTransport(
            lambda r: httpx.Response(200, json=views[r.url.path]))) as client:
        info = client.info()
        members = client.members()
    assert (info.job, info.status, info.mode, info.generation) == ("j", "running", "service", 1)
    assert (info.node_id, info.node_rank, info.address, info.num_proc) == (0, 0, "127.0.0.2", 2)
    assert members.members[0].addr == "127.0.0.2" and members.members[0].state == "running"
    assert members.raw["members"][0]["last_seen"] == 0.1
    path.write_text("[]")
    with pytest.raises(ValueError, match="not a connection file"):
        JobClient.from_file(path)


def test_info_of_an_agent_outside_the_world_has_no_node_rank():
    forming = {"job": "j", "node_id": 3, "node_rank": None, "addr": "127.0.0.5", "num_proc": 1, "generation": 0,
               "status": "forming", "mode": "batch"}
    transport = httpx.MockTransport(lambda r: httpx.Response(200, json=forming))
    with JobClient("http://c:1", TOKEN, transport=transport) as client:
        info = client.info()
    assert (info.node_id, info.node_rank, info.status) == (3, None, "forming")


def test_a_verdict_learnt_is_dropped_once_the_coordinator_answers_a_new_world():
    """A StatefulSet restarts a failed service job's coordinator pod into a new world: once its
    ``/info`` answers with a status that is not terminal, calls reach it again instead of raising the
    old world's ``JobEnded`` forever."""
    state = {"status": "failed"}
    seen: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        if request.url.path == "/info":
            return httpx.Response(200, json={"job": "j", "status": state["status"], "message": "node 1 lost",
                                             "exit_code": 1})
        if state["status"] == "failed":
            ended = JobEnded("failed", "node 1 lost", 1)
            return httpx.Response(error_status(ended), json=error_body(ended))
        return httpx.Response(200, json={"results": [pack_result(7, "json")], "serialization": "json"})

    client = JobClient("http://coordinator:1", TOKEN, transport=httpx.MockTransport(handle))
    with pytest.raises(JobEnded, match="node 1 lost"):
        client.call("m:f")
    with pytest.raises(JobEnded):
        client.call("m:f")
    assert client.info().status == "failed"
    state["status"] = "running"  # the coordinator's pod restarted into a new world
    assert client.call("m:f") == [7]
    assert client.info().status == "running"
    assert seen[-2:] == ["/call", "/info"]
