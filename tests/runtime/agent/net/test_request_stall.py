"""A client that stops in the middle of a request is answered 408 and its connection closed after
``REQUEST_STALL`` s without a byte; one that keeps sending, however slowly, and an idle kept-alive connection
between requests, are kept (the coordinator's watch holds such idle connections on purpose). The stall is shortened
to 0.2 s here; what is asserted is the outcome, not a time."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from runtime.agent import contract
from runtime.agent.net import connection, server
from runtime.agent.net.server import AgentServer, Response
from tests.runtime.agent.net.test_loop import JOB, TOKEN, head, read_answer

pytestmark = pytest.mark.unit

STALL = 0.2


@pytest.fixture
def port(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    monkeypatch.setattr(connection, "REQUEST_STALL", STALL)
    monkeypatch.setattr(server, "REQUEST_STALL", STALL)
    served = AgentServer(("127.0.0.1", 0), TOKEN, {("PUT", "/echo"): lambda r: Response(200, {"echo": r.body["n"]})},
                         max_body=contract.MAX_BODY_BYTES, job=JOB, on_loop={("PUT", "/echo")})
    served.start()
    yield served.server_address[1]
    served.stop()


def rest(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    data = b""
    while chunk := sock.recv(1 << 16):
        data += chunk
    return data


@pytest.mark.parametrize("sent", [b"PUT /echo HTTP/1.1\r\nAuthoriz", None], ids=["head", "body"])
def test_a_request_stopped_midway_is_answered_408_and_closed(port: int, sent: bytes | None) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(sent if sent is not None else head("PUT", "/echo", b'{"n": 1}')[:-3])  # the body's last bytes
        answer = rest(sock)
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert b"Connection: close" in answer and b"no byte of the request came for 0.2 s" in answer


def test_a_slow_sender_and_an_idle_kept_alive_connection_are_kept(port: int) -> None:
    request = head("PUT", "/echo", b'{"n": 7}')
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        for i in range(0, len(request), len(request) // 6 + 1):  # a byte run every half stall: always progressing
            sock.sendall(request[i:i + len(request) // 6 + 1])
            time.sleep(STALL / 2)
        assert read_answer(sock) == {"echo": 7}
        time.sleep(3 * STALL)  # idle between requests
        sock.sendall(head("PUT", "/echo", b'{"n": 8}'))
        assert read_answer(sock) == {"echo": 8}
