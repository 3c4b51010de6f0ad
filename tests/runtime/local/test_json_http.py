"""Local mode's HTTP (``runtime.local.json_http``) answers and fails as the agents' own does: the same
route behind a ``JsonServer`` and an ``AgentServer``, asked by either side's one-shot client, gives the
same answers and the same errors, word for word."""

from __future__ import annotations

import socket
from typing import Any, Callable, Optional

import pytest

from runtime.agent.errors import HttpError, TransportError
from runtime.agent.net import transport
from runtime.agent.net.server import AgentServer
from runtime.agent.net.server import Response as AgentResponse
from runtime.local import json_http
from runtime.local.json_http import JsonServer, Response

pytestmark = pytest.mark.unit

TOKEN, JOB, CAP = "secret", "job-a", 1024


def _join(body: Any, make: Callable[[int, Any], Any]) -> Any:
    if body.get("refuse"):
        raise HttpError(409, "--node-rank=3 is invalid: use 0 to 2")
    return make(200, {"node_id": 1, "echo": body})


def _servers() -> list[Any]:
    local = JsonServer(("127.0.0.1", 0), TOKEN, {("POST", "/join"): lambda r: _join(r.body, Response)},
                       max_body=CAP, job=JOB)
    agent = AgentServer(("127.0.0.1", 0), TOKEN, {("POST", "/join"): lambda r: _join(r.body, AgentResponse)},
                        max_body=CAP, job=JOB)
    for server in (local, agent):
        server.start()
    return [local, agent]


def _outcome(ask: Callable[..., Any], port: int, token: str = TOKEN, job: str = JOB, path: str = "/join",
             body: Optional[dict[str, Any]] = None) -> tuple[str, Optional[int], str]:
    try:
        return "ok", 200, repr(ask("127.0.0.1", port, "POST" if path == "/join" else "GET", path, token,
                                   {"key": "a"} if body is None else body, timeout=5.0, job=job))
    except TransportError as exc:
        return type(exc).__name__, exc.status, str(exc).replace(str(port), "PORT")


CASES = {
    "answered": {},
    "refused by the route": {"body": {"refuse": True}},
    "a wrong token": {"token": "wrong"},
    "another job": {"job": "job-b"},
    "no such route": {"path": "/nowhere"},
    "a body over the cap": {"body": {"key": "x" * CAP}},
}


@pytest.mark.parametrize("case", CASES)
def test_both_servers_answer_both_clients_alike(case: str):
    servers = _servers()
    try:
        seen = {(server_kind, client_kind): _outcome(ask, server.server_address[1], **CASES[case])
                for server_kind, server in zip(("local", "agent"), servers)
                for client_kind, ask in (("local", json_http.request_json), ("agent", transport.request_json))}
    finally:
        for server in servers:
            server.stop()
    assert len(set(seen.values())) == 1, seen
    if case == "answered":
        assert seen["local", "local"] == ("ok", 200, repr({"node_id": 1, "echo": {"key": "a"}}))
    else:
        assert seen["local", "local"][1] in (409, 401, 403, 404, 413)


def test_no_server_is_a_transport_error_without_a_status_as_the_agents_client_says():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    said = [_outcome(ask, port) for ask in (json_http.request_json, transport.request_json)]
    assert said[0] == said[1]
    assert said[0][:2] == ("TransportError", None) and "failed: " in said[0][2]


def test_a_second_server_on_a_served_address_is_refused():
    first = JsonServer(("127.0.0.1", 0), TOKEN, {}, max_body=CAP, job=JOB)
    try:
        with pytest.raises(OSError):
            JsonServer(("127.0.0.1", first.server_address[1]), TOKEN, {}, max_body=CAP, job=JOB)
    finally:
        first.stop()


def test_an_ipv6_server_is_reached_at_its_bare_address():
    server = JsonServer(("::1", 0), TOKEN, {("GET", "/info"): lambda r: Response(200, {"peer": r.peer})},
                        max_body=CAP, job=JOB)
    server.start()
    try:
        assert json_http.request_json("::1", server.server_address[1], "GET", "/info", TOKEN, job=JOB) == {
            "peer": "::1"}
    finally:
        server.stop()
