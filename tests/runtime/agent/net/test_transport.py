"""The agent's HTTP server and the HTTP transport: kept-alive exchanges and one-shot requests, over real sockets."""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from runtime.agent import contract
from runtime.agent.errors import TransportError, Unauthorized
from runtime.agent.net.loop import EventLoop
from runtime.agent.net.multiplex import MultiplexBatch
from runtime.agent.net.peer import Exchange
from runtime.agent.net.server import AgentServer, Request, Response
from runtime.agent.net.transport import HttpTransport, encode, request_json
from tests.conftest import wait_until

pytestmark = pytest.mark.unit

TOKEN = "transport-token"
JOB = "transport-job"


def _echo(request: Request) -> Response:
    return Response(200, {"echo": request.body.get("n")})


@pytest.fixture
def server() -> Iterator[AgentServer]:
    served = AgentServer(("127.0.0.1", 0), TOKEN, {("PUT", "/echo"): _echo}, max_body=contract.MAX_BODY_BYTES, job=JOB)
    served.start()
    yield served
    served.stop()


@pytest.fixture(params=["in the thread that asks", "on an event loop"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[HttpTransport]:
    """An ``HttpTransport`` doing its I/O in the calling thread, or on a running event loop (an agent's): there
    the calling thread's own I/O path fails the test if it is taken."""
    made = HttpTransport(TOKEN, job=JOB)
    loop = EventLoop()
    thread = threading.Thread(target=loop.run, args=(lambda: None,), daemon=True)
    if request.param == "on an event loop":
        thread.start()
        assert wait_until(loop.serving, timeout=10)
        made.use_loop(loop)

        def in_this_thread(*_args: Any) -> None:
            raise AssertionError("the exchange's I/O ran in the calling thread, not on the loop")

        monkeypatch.setattr(HttpTransport, "_over", in_this_thread)
        monkeypatch.setattr(MultiplexBatch, "_run_here", in_this_thread)
    yield made
    made.close()
    if thread.is_alive():
        loop.stop()
        thread.join(timeout=10)


def echo(transport: HttpTransport, port: int, n: int) -> int:
    exchange = Exchange("127.0.0.1", port, "PUT", "/echo", encode({"n": n}))
    return transport.exchange(exchange, timeout=5.0).result(exchange)["echo"]


def test_exchanges_with_one_peer_share_one_kept_alive_connection(server: AgentServer, transport: HttpTransport):
    answers = [echo(transport, server.server_address[1], n) for n in range(5)]
    assert answers == [0, 1, 2, 3, 4]
    assert server.accepted == 1
    assert server.requests_served == 5


def test_one_shot_requests_open_a_connection_each(server: AgentServer):
    for n in range(3):
        answer = request_json("127.0.0.1", server.server_address[1], "PUT", "/echo", TOKEN, {"n": n}, job=JOB)
        assert answer == {"echo": n}
    assert server.accepted == 3


def test_a_connection_the_peer_closed_while_idle_is_not_reused(server: AgentServer, transport: HttpTransport):
    assert echo(transport, server.server_address[1], 1) == 1
    assert server.open_connections == 1
    server.close_connections()
    assert echo(transport, server.server_address[1], 2) == 2
    assert server.accepted == 2


def test_an_exchange_to_a_closed_port_fails_without_a_status(transport: HttpTransport):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    exchange = Exchange("127.0.0.1", port, "PUT", "/echo", encode({"n": 1}))
    for _ in range(2):
        answer = transport.exchange(exchange, timeout=5.0)
        assert answer.status is None and answer.refused
        with pytest.raises(TransportError, match="failed") as info:
            answer.result(exchange)
        assert info.value.status is None


def test_status_errors_and_a_wrong_token_are_transport_errors(server: AgentServer):
    port = server.server_address[1]
    nowhere = Exchange("127.0.0.1", port, "PUT", "/nowhere", b"{}")
    with pytest.raises(TransportError) as info:
        HttpTransport(TOKEN, job=JOB).exchange(nowhere, timeout=5.0).result(nowhere)
    assert info.value.status == 404
    wrong = Exchange("127.0.0.1", port, "PUT", "/echo", encode({"n": 1}))
    with pytest.raises(Unauthorized):
        HttpTransport("wrong", job=JOB).exchange(wrong, timeout=5.0).result(wrong)


def exchange_raw(port: int, data: bytes) -> tuple[list[bytes], bytes]:
    """Send raw bytes, read until the server closes; the response heads' first lines and everything read."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(data)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    return re.findall(rb"HTTP/1\.1 \d{3} [^\r]*", received), received


def echo_request(n: int, *, version: str = "HTTP/1.1", extra: str = "") -> bytes:
    body = b'{"n": %d}' % n
    head = (f"PUT /echo {version}\r\nauthorization: Bearer {TOKEN}\r\ncontent-length: {len(body)}\r\n{extra}\r\n")
    return head.encode() + body


def test_requests_on_one_connection_are_answered_in_order_until_the_client_asks_to_close(server: AgentServer):
    data = echo_request(1) + echo_request(2) + echo_request(3, extra="Connection: close\r\n") + echo_request(4)
    status_lines, received = exchange_raw(server.server_address[1], data)
    assert status_lines == [b"HTTP/1.1 200 OK"] * 3
    assert received.count(b'"echo"') == 3 and b'{"echo": 3}' in received and b'{"echo": 4}' not in received
    assert received.endswith(b'{"echo": 3}')


def test_an_http_1_0_request_is_answered_and_the_connection_closed(server: AgentServer):
    data = echo_request(1, version="HTTP/1.0") + echo_request(2)
    status_lines, received = exchange_raw(server.server_address[1], data)
    assert status_lines == [b"HTTP/1.1 200 OK"]
    assert b"Connection: close" in received and b'{"echo": 2}' not in received


def test_expect_100_continue_is_answered_before_the_body_is_read(server: AgentServer):
    with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=5) as sock:
        sock.sendall(echo_request(5, extra="Expect: 100-continue\r\n").split(b"\r\n\r\n")[0] + b"\r\n\r\n")
        assert sock.recv(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(b'{"n": 5}')
        assert sock.recv(65536).endswith(b'{"echo": 5}')


@pytest.mark.parametrize(("data", "status"), [
    (b"NONSENSE\r\n\r\n", b"400"),
    (b"GET /healthz SPDY/3\r\n\r\n", b"400"),
    (b"GET /healthz HTTP/1.1\r\nno colon here\r\n\r\n", b"400"),
    (b"GET /healthz HTTP/1.1\r\n" + b"X-A: b\r\n" * 101 + b"\r\n", b"431"),
    (b"GET /healthz HTTP/1.1\r\nX-A: " + b"b" * 70000 + b"\r\n\r\n", b"431"),
    (b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n", b"414"),
])
def test_a_malformed_request_head_gets_its_status_and_the_connection_closes(server: AgentServer, data: bytes,
                                                                           status: bytes):
    status_lines, received = exchange_raw(server.server_address[1], data + b"GET /healthz HTTP/1.1\r\n\r\n")
    assert [line.split()[1] for line in status_lines] == [status]
    assert b'"error"' in received


def test_header_names_are_case_insensitive(server: AgentServer):
    status_lines, received = exchange_raw(server.server_address[1], echo_request(9, extra="CONNECTION: CLOSE\r\n"))
    assert status_lines == [b"HTTP/1.1 200 OK"] and received.endswith(b'{"echo": 9}')


@pytest.fixture
def canned() -> Iterator[tuple[int, list[bytes]]]:
    """A raw server answering each connection's first request with the next canned reply, in two pieces."""
    replies: list[bytes] = []
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                received = b""
                while b"\r\n\r\n" not in received:
                    received += conn.recv(65536)
                reply = replies.pop(0)
                conn.sendall(reply[:7])
                conn.sendall(reply[7:])

    threading.Thread(target=serve, daemon=True).start()
    yield listener.getsockname()[1], replies
    listener.close()


def test_a_response_arriving_in_pieces_is_read_whole(canned: tuple[int, list[bytes]]):
    port, replies = canned
    replies.append(b'HTTP/1.1 200 OK\r\nContent-Length: 11\r\nConnection: close\r\n\r\n{"a": "bc"}')
    assert request_json("127.0.0.1", port, "GET", "/x", TOKEN, job=JOB) == {"a": "bc"}


@pytest.mark.parametrize(("reply", "status", "message"), [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 40\r\n\r\n{\"cut\": ", None, "closed in the middle of the response"),
    (b"SMTP ready\r\n\r\n", None, "malformed response head"),
    (b"HTTP/1.1 abc\r\n\r\n", None, "malformed response head"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", 200, "response is not JSON"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n[]", 200, "not a JSON object"),
    (b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 17\r\n\r\n{\"error\": \"busy\"}", 503, "503 busy"),
])
def test_a_bad_response_is_a_transport_error_with_the_status_if_one_arrived(
        canned: tuple[int, list[bytes]], reply: bytes, status: Any, message: str):
    port, replies = canned
    replies.append(reply)
    with pytest.raises(TransportError, match=message) as info:
        request_json("127.0.0.1", port, "GET", "/x", TOKEN, job=JOB)
    assert info.value.status == status


def test_a_peer_that_closes_without_answering_a_fresh_connection_is_not_asked_twice(
        canned: tuple[int, list[bytes]], transport: HttpTransport):
    port, replies = canned
    replies.extend([b"", b'HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}'])
    exchange = Exchange("127.0.0.1", port, "GET", "/x")
    with pytest.raises(TransportError, match="closed the connection without answering") as info:
        transport.exchange(exchange, timeout=5.0).result(exchange)
    assert info.value.status is None
    assert transport.exchange(exchange, timeout=5.0).result(exchange) == {}


def test_a_kept_alive_connection_the_peer_drops_at_the_next_request_is_asked_again_on_a_new_one(
        transport: HttpTransport):
    """The peer answers one request and keeps the connection, then closes it on reading the next one
    without answering (as a server does that times out idle connections just then): the request is
    sent once more, on a new connection, because nothing of it was processed."""
    listener = socket.create_server(("127.0.0.1", 0))
    reply = b'HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{"n": 1}\n'
    connections = []

    def serve() -> None:
        first, _ = listener.accept()
        connections.append(first)
        first.recv(65536)
        first.sendall(reply)
        first.recv(65536)  # the second request on the kept-alive connection: dropped unanswered
        first.close()
        second, _ = listener.accept()
        connections.append(second)
        second.recv(65536)
        second.sendall(reply)
        second.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    exchange = Exchange("127.0.0.1", listener.getsockname()[1], "GET", "/x")
    assert transport.exchange(exchange, timeout=5.0).result(exchange) == {"n": 1}
    assert transport.exchange(exchange, timeout=5.0).result(exchange) == {"n": 1}
    thread.join(timeout=5)
    listener.close()
    assert len(connections) == 2 and transport.sent == 3


def test_a_body_that_is_not_a_json_object_is_refused_before_anything_is_sent(server: AgentServer):
    """``bench/membership.py`` once passed its timeout where the body goes: the GET went out with ``30.0`` as
    its body and the default 5 s timeout; now the number is refused, and the timeout is keyword only."""
    with pytest.raises(TypeError, match="a request body is a JSON object, bytes or None, not float"):
        request_json("127.0.0.1", server.server_address[1], "GET", contract.ROUTE_HEALTHZ, TOKEN, 30.0, job=JOB)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        request_json("127.0.0.1", server.server_address[1], "GET", contract.ROUTE_HEALTHZ, TOKEN, None, 30.0, job=JOB)  # type: ignore[misc]
    assert server.accepted == 0
    assert encode({"n": 1}) == b'{"n": 1}' and encode(b"raw") == b"raw" and encode(None) is None
