"""Agent transport: one-shot requests and the heartbeat's kept-alive peer connection, over real sockets."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from runtime.agent import contract
from runtime.agent.errors import TransportError, Unauthorized
from runtime.agent.transport import AgentServer, PeerConnection, Request, Response, request_json

TOKEN = "transport-token"


class CountingServer(AgentServer):
    """An agent server that counts the connections it accepted."""

    def __init__(self) -> None:
        self.accepted = 0
        self.connections: list[socket.socket] = []
        super().__init__(("127.0.0.1", 0), TOKEN, {("PUT", "/echo"): self._echo}, contract.MAX_BODY_BYTES)

    def process_request(self, request: Any, client_address: Any) -> None:
        self.accepted += 1
        self.connections.append(request)
        super().process_request(request, client_address)

    @staticmethod
    def _echo(request: Request) -> Response:
        return Response(200, {"echo": request.body.get("n")})


@pytest.fixture
def server() -> Iterator[CountingServer]:
    served = CountingServer()
    served.start()
    yield served
    served.stop()


def test_a_peer_connection_sends_every_request_over_one_connection(server: CountingServer):
    link = PeerConnection("127.0.0.1", server.server_address[1], TOKEN, timeout=5.0)
    answers = [link.request("PUT", "/echo", {"n": n})["echo"] for n in range(5)]
    link.close()
    assert answers == [0, 1, 2, 3, 4]
    assert server.accepted == 1
    assert server.requests_served == 5


def test_one_shot_requests_open_a_connection_each(server: CountingServer):
    for n in range(3):
        assert request_json("127.0.0.1", server.server_address[1], "PUT", "/echo", TOKEN, {"n": n}) == {"echo": n}
    assert server.accepted == 3


def test_a_peer_connection_reopens_a_connection_the_peer_closed_while_idle(server: CountingServer):
    link = PeerConnection("127.0.0.1", server.server_address[1], TOKEN, timeout=5.0)
    assert link.request("PUT", "/echo", {"n": 1}) == {"echo": 1}
    (accepted,) = server.connections
    accepted.shutdown(socket.SHUT_RDWR)
    assert link.request("PUT", "/echo", {"n": 2}) == {"echo": 2}
    link.close()
    assert server.accepted == 2


def test_a_peer_connection_to_a_closed_port_fails_without_a_status():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    link = PeerConnection("127.0.0.1", port, TOKEN, timeout=5.0)
    for _ in range(2):
        with pytest.raises(TransportError, match="failed") as info:
            link.request("PUT", "/echo", {"n": 1})
        assert info.value.status is None


def test_a_peer_connection_reports_status_errors_and_a_wrong_token(server: CountingServer):
    port = server.server_address[1]
    with pytest.raises(TransportError) as info:
        PeerConnection("127.0.0.1", port, TOKEN, timeout=5.0).request("PUT", "/nowhere", {})
    assert info.value.status == 404
    with pytest.raises(Unauthorized):
        PeerConnection("127.0.0.1", port, "wrong", timeout=5.0).request("PUT", "/echo", {"n": 1})
