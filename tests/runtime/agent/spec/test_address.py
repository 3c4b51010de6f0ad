"""Addresses in both families: bracketing, parsing, and a dual-stack server reached over both."""

from __future__ import annotations

import socket

import pytest

from runtime.agent import contract
from runtime.agent.net.server import AgentServer, Request, Response
from runtime.agent.net.transport import request_json
from runtime.agent.spec.address import host_port, split_host_port, url
from runtime.agent.spec.agent_settings import identity_from_env

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("text", "parsed"), [
    ("job-0.job", ("job-0.job", None)),
    ("job-0.job:40000", ("job-0.job", 40000)),
    ("10.0.0.2:40000", ("10.0.0.2", 40000)),
    ("fd00::2", ("fd00::2", None)),
    ("[fd00::2]", ("fd00::2", None)),
    ("[fd00::2]:40000", ("fd00::2", 40000)),
])
def test_host_and_port_are_split_in_both_families(text: str, parsed: tuple[str, int | None]):
    assert split_host_port(text) == parsed


@pytest.mark.parametrize(("text", "problem"), [
    ("[fd00::2:40000", "without ']'"), ("[fd00::2]40000", "expected ':port'"), ("host:http", "not a number"),
    (":40000", "no host"),
])
def test_a_malformed_address_names_the_problem(text: str, problem: str):
    with pytest.raises(ValueError, match=problem):
        split_host_port(text)


def test_ipv6_is_bracketed_before_a_port_and_in_urls_and_ipv4_and_names_are_not():
    assert host_port("fd00::2", 29532) == "[fd00::2]:29532"
    assert host_port("10.0.0.2", 29532) == "10.0.0.2:29532" and host_port("job-0.job", 1) == "job-0.job:1"
    assert url("fd00::2", 32300, "/info") == "http://[fd00::2]:32300/info"


def test_a_bracketed_coordinator_is_read_from_the_environment():
    env = {contract.COORDINATOR_HOST: "[fd00::2]:40000", contract.NODE_RANK_SETTING: "1"}
    identity = identity_from_env(env)
    assert (identity.coordinator, identity.coordinator_port) == ("fd00::2", 40000)
    bare = identity_from_env({contract.COORDINATOR_HOST: "fd00::2", contract.NODE_RANK_SETTING: "1"})
    assert (bare.coordinator, bare.coordinator_port) == ("fd00::2", contract.AGENT_PORT)


def test_a_server_on_every_interface_answers_over_ipv4_and_ipv6():
    def info(_request: Request) -> Response:
        return Response(200, {"ok": True})

    server = AgentServer(("", 0), "t", {("GET", "/info"): info}, max_body=contract.MAX_BODY_BYTES, job="j")
    server.start()
    try:
        assert server.address_family == socket.AF_INET6
        port = server.server_address[1]
        for host in ("127.0.0.1", "::1"):
            assert request_json(host, port, "GET", "/info", "t", job="j") == {"ok": True}
    finally:
        server.stop()
