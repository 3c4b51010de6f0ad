"""The agent's server on one event loop: threads do not grow with connections, and a slow or hostile
client (a head sent byte by byte, an answer never read, a handler that blocks) holds up no other.
Real sockets, a real ``AgentServer``; every ordering is shown by events, none by wall time."""

from __future__ import annotations

import json
import selectors
import socket
import threading
from collections.abc import Iterator

import pytest

from runtime.agent import contract
from runtime.agent.net.handlers import HandlerPool
from runtime.agent.net.loop import EventLoop
from runtime.agent.net.peer import Exchange
from runtime.agent.net.server import SHORT_WORKERS, AgentServer, Request, Response
from runtime.agent.net.transport import HttpTransport, encode
from tests.conftest import wait_until

pytestmark = pytest.mark.unit

TOKEN = "loop-token"
JOB = "loop-job"
BIG = 8 << 20
"""Characters of ``GET /big``'s answer: twice the most a socket's send buffer holds (``tcp_wmem``'s 4 MiB)."""


class Blocking:
    """``POST /block``: a handler that waits until released (a call running, say)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.running = 0
        self._lock = threading.Lock()

    def __call__(self, request: Request) -> Response:
        with self._lock:
            self.running += 1
        self.release.wait(30)
        return Response(200, {"n": request.body.get("n")})


@pytest.fixture
def blocking() -> Blocking:
    return Blocking()


@pytest.fixture
def server(blocking: Blocking) -> Iterator[AgentServer]:
    routes = {("PUT", "/echo"): lambda r: Response(200, {"echo": r.body.get("n")}),
              ("GET", "/big"): lambda _r: Response(200, {"big": "x" * BIG}),
              ("POST", "/block"): blocking}
    served = AgentServer(("127.0.0.1", 0), TOKEN, routes, max_body=contract.MAX_BODY_BYTES, job=JOB,
                         on_loop={("PUT", "/echo"), ("GET", "/big")})
    served.start()
    yield served
    blocking.release.set()
    served.stop()


def head(method: str, path: str, body: bytes = b"") -> bytes:
    return (f"{method} {path} HTTP/1.1\r\nAuthorization: Bearer {TOKEN}\r\n{contract.JOB_HEADER}: {JOB}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def read_answer(sock: socket.socket) -> dict:
    """One whole response's JSON body (the connection carries no other response after it)."""
    return read_answers(sock, 1)[0]


def read_answers(sock: socket.socket, count: int) -> list[dict]:
    """The JSON bodies of the next ``count`` responses on ``sock``."""
    data, bodies = bytearray(), []  # appended to in place: a small receive buffer gives thousands of chunks
    while len(bodies) < count:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(1 << 20)
            assert chunk, "the server closed the connection mid-answer"
            data += chunk
        end = data.index(b"\r\n\r\n")
        top, data = bytes(data[:end]), data[end + 4:]
        length = int(top.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        while len(data) < length:
            chunk = sock.recv(1 << 20)
            assert chunk, "the server closed the connection mid-answer"
            data += chunk
        bodies.append(json.loads(data[:length]))
        del data[:length]
    return bodies


def echo(transport: HttpTransport, port: int, n: int) -> int:
    exchange = Exchange("127.0.0.1", port, "PUT", "/echo", encode({"n": n}))
    return transport.exchange(exchange, timeout=30.0).result(exchange)["echo"]


def kept_alive(port: int, count: int) -> list[socket.socket]:
    """``count`` connections, each having had one request answered, left open."""
    socks = []
    for n in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        sock.sendall(head("PUT", "/echo", b'{"n": %d}' % n))
        assert read_answer(sock) == {"echo": n}
        socks.append(sock)
    return socks


def test_two_hundred_kept_alive_connections_take_no_more_threads_than_two(server: AgentServer):
    port = server.server_address[1]
    few = kept_alive(port, 2)
    with_two = threading.active_count()
    many = kept_alive(port, 200)
    assert server.open_connections == 202
    assert threading.active_count() <= with_two
    for sock in few + many:
        sock.close()


def test_a_head_sent_byte_by_byte_holds_up_no_other_client(server: AgentServer):
    port = server.server_address[1]
    slow = socket.create_connection(("127.0.0.1", port), timeout=30)
    transport = HttpTransport(TOKEN, job=JOB)
    request = head("PUT", "/echo", b'{"n": -1}')
    for i, byte in enumerate(request[:-1]):
        slow.sendall(bytes([byte]))
        assert echo(transport, port, i) == i, "another client was answered while the slow head was still arriving"
    slow.sendall(request[-1:])
    assert read_answer(slow) == {"echo": -1}
    assert server.requests_served == len(request)
    slow.close()
    transport.close()


def test_an_answer_never_read_holds_up_no_other_client(server: AgentServer):
    port = server.server_address[1]
    reader = socket.socket()
    reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    reader.connect(("127.0.0.1", port))
    reader.sendall(head("GET", "/big") + head("PUT", "/echo", b'{"n": 7}'))
    transport = HttpTransport(TOKEN, job=JOB)
    assert wait_until(lambda: server.requests_served == 1, timeout=30), "the big answer's request was read"
    for n in range(3):
        assert echo(transport, port, n) == n, "another client was answered while the big answer sat unread"
    assert server.requests_served == 4, "the request pipelined behind the unread answer waits for it"
    reader.settimeout(30)
    big, pipelined = read_answers(reader, 2)
    assert len(big["big"]) == BIG and pipelined == {"echo": 7}
    reader.close()
    transport.close()


def test_a_blocking_handler_runs_off_the_loop_in_a_bounded_pool(server: AgentServer, blocking: Blocking):
    port = server.server_address[1]
    transport = HttpTransport(TOKEN, job=JOB)
    assert echo(transport, port, 0) == 0
    before = threading.active_count()
    waiting = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(2 * SHORT_WORKERS)]
    for n, sock in enumerate(waiting):
        sock.sendall(head("POST", "/block", b'{"n": %d}' % n))
    assert wait_until(lambda: blocking.running == SHORT_WORKERS, timeout=30)
    assert echo(transport, port, 1) == 1, "the loop answers while every pool thread blocks"
    assert threading.active_count() == before + SHORT_WORKERS
    assert blocking.running == SHORT_WORKERS, "the rest wait for a free thread, none started for them"
    blocking.release.set()
    assert [read_answer(sock) for sock in waiting] == [{"n": n} for n in range(2 * SHORT_WORKERS)]
    for sock in waiting:
        sock.close()
    transport.close()


def test_a_vote_is_answered_while_every_other_handler_thread_blocks(blocking: Blocking):
    """Long-polled output reads (``SHORT_WORKERS`` of them and more) hold every thread of the ordinary pool; a vote or
    a probe, in the ``urgent`` pool, is still answered (before the urgent pool it waited for one of them to end)."""
    votes = Blocking()
    votes.release.set()  # a vote's verdict comes at once
    served = AgentServer(("127.0.0.1", 0), TOKEN, {("POST", "/block"): blocking, ("POST", "/vote"): votes},
                         max_body=contract.MAX_BODY_BYTES, job=JOB, urgent={("POST", "/vote")})
    served.start()
    port = served.server_address[1]
    waiting = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(SHORT_WORKERS + 1)]
    try:
        for n, sock in enumerate(waiting):
            sock.sendall(head("POST", "/block", b'{"n": %d}' % n))
        assert wait_until(lambda: blocking.running == SHORT_WORKERS, timeout=30)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as vote:
            vote.sendall(head("POST", "/vote", b'{"n": 7}'))
            assert read_answer(vote) == {"n": 7}
        assert blocking.running == SHORT_WORKERS  # none of the blocked reads was let go for it
    finally:
        blocking.release.set()
        for sock in waiting:
            sock.close()
        served.stop()


def test_a_pool_needs_a_thread():
    with pytest.raises(ValueError, match="size=0 is invalid"):
        HandlerPool(0, "none")


def test_a_watcher_that_raises_is_printed_its_socket_closed_and_the_loop_serves_on(capfd: pytest.CaptureFixture[str]):
    """A bug in one socket's watcher (a hop's answer handler, the watch's) must not end the loop that serves every
    other connection of the agent, nor spin it: the socket, still readable, is closed, not selected for ever."""
    loop = EventLoop()
    thread = threading.Thread(target=loop.run, args=(lambda: None,), daemon=True)
    thread.start()
    reader, writer = socket.socketpair()
    served, calls = threading.Event(), []

    def broken(_mask: int) -> None:
        calls.append(1)
        raise RuntimeError("a watcher's bug")

    try:
        loop.call_soon(lambda: loop.register(reader, selectors.EVENT_READ, broken))
        loop.call_soon(lambda: writer.send(b"x"))
        assert wait_until(lambda: "a watcher's bug" in capfd.readouterr().err, timeout=10)
        loop.call_soon(served.set)
        assert served.wait(10)
        assert thread.is_alive() and reader.fileno() == -1 and calls == [1]
    finally:
        loop.stop()
        thread.join(10)
        reader.close()
        writer.close()


def test_a_loop_whose_stop_callback_raises_still_says_it_closed():
    """A thread waiting on the loop (``_awaited``, a batch's waiter) stops waiting when ``closed()`` says so; a
    raising ``on_stop`` must not leave it unsaid."""
    loop = EventLoop()

    def on_stop() -> None:
        raise RuntimeError("on_stop's bug")

    loop.call_soon(loop.stop)
    with pytest.raises(RuntimeError, match="on_stop's bug"):
        loop.run(on_stop)
    assert loop.closed()
