"""A refused request's body is never held: an unauthenticated client cannot make the agent buffer its body.

A request refused on its head (no token: 401; another job: 403; no such route: 404) needs no body. A client
waiting for ``100 Continue`` is answered at once and its connection closed; one that sends its body anyway has it
dropped as it comes, and its kept-alive connection then serves its next request.
"""

from __future__ import annotations

import socket
import tracemalloc
from collections.abc import Iterator

import pytest

from runtime.agent import contract
from runtime.agent.net.server import AgentServer, Request, Response

pytestmark = pytest.mark.unit

TOKEN = "refused-bodies-token"
BODY = 8 << 20
"""Bytes of the body a refused client announces (under the cap, so it is not refused as too large)."""


@pytest.fixture
def server() -> Iterator[AgentServer]:
    def echo(request: Request) -> Response:
        return Response(200, {"echo": request.body.get("n")})

    served = AgentServer(("127.0.0.1", 0), TOKEN, {("PUT", "/echo"): echo}, max_body=contract.MAX_BODY_BYTES,
                         job="refused-bodies")
    served.start()
    yield served
    served.stop()


def head(token: str, length: int, extra: str = "") -> bytes:
    return (f"PUT /echo HTTP/1.1\r\nAuthorization: Bearer {token}\r\nContent-Length: {length}\r\n{extra}\r\n").encode()


def read_to_end(sock: socket.socket) -> bytes:
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


@pytest.mark.parametrize("token", ["wrong-token", ""])
def test_a_refused_client_waiting_for_100_continue_is_answered_at_once_and_closed(server: AgentServer, token: str):
    with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=5) as sock:
        sock.sendall(head(token, BODY, "Expect: 100-continue\r\n"))
        received = read_to_end(sock)  # the server closes: no body was sent, and none is waited for
    assert received.startswith(b"HTTP/1.1 401 ") and b"100 Continue" not in received
    assert b"Connection: close" in received and b"bearer token" in received


def test_the_job_token_still_gets_100_continue(server: AgentServer):
    with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=5) as sock:
        sock.sendall(head(TOKEN, 8, "Expect: 100-continue\r\n"))
        assert sock.recv(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(b'{"n": 7}')
        assert sock.recv(65536).endswith(b'{"echo": 7}')


def test_a_refused_body_sent_anyway_is_dropped_as_it_comes_and_the_connection_serves_on(server: AgentServer):
    """The server runs in this process, so ``tracemalloc`` sees its buffers: refusing an 8 MiB body holds
    well under 1 MiB of it at any time (the body used to be read whole before the 401)."""
    chunk = b"x" * (256 << 10)
    tracemalloc.start()
    try:
        with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=10) as sock:
            sock.sendall(head("wrong-token", BODY))
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            for _ in range(BODY // len(chunk)):
                sock.sendall(chunk)
            reply = sock.recv(65536)
            while b'"error"' not in reply:
                reply += sock.recv(65536)
            peak = tracemalloc.get_traced_memory()[1] - base
            sock.sendall(head(TOKEN, 8) + b'{"n": 3}')
            answer = sock.recv(65536)
    finally:
        tracemalloc.stop()
    assert reply.startswith(b"HTTP/1.1 401 ")
    assert peak < (1 << 20), f"the server held {peak} bytes while refusing a body of {BODY}"
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b'{"echo": 3}')


def test_a_body_without_a_length_is_refused_with_411_naming_the_header(server: AgentServer):
    with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=5) as sock:
        sock.sendall(f"PUT /echo HTTP/1.1\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode())
        received = read_to_end(sock)
    assert received.startswith(b"HTTP/1.1 411 ") and b"Content-Length required" in received
