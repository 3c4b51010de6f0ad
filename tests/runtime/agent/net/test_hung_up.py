"""``Request.hung_up``: a long request can tell a client that went (closed, reset, or ended its writing
side) from one that waits for its answer, or one that sent more. Real sockets, a real ``AgentServer``."""

from __future__ import annotations

import json
import queue
import socket
import struct
import threading

import pytest

from runtime.agent import contract
from runtime.agent.net.server import AgentServer, Request, Response

pytestmark = pytest.mark.unit

TOKEN = "t"
LOOK = 0.1
"""Seconds each of the route's looks waits for the client to hang up: a look that returns ``False`` waited
all of it (the client still there)."""
LOOKS = 200
"""The route's looks before it answers anyway (20 s)."""


@pytest.fixture
def server():
    """A server whose one route reports ``hung_up`` answers until the client hangs up (or :data:`LOOKS` looks)."""
    seen: queue.SimpleQueue[bool] = queue.SimpleQueue()
    started = threading.Event()

    def watch(request: Request) -> Response:
        assert request.hung_up is not None
        started.set()
        for _ in range(LOOKS):
            gone = request.hung_up(LOOK)
            seen.put(gone)
            if gone:
                break
        return Response(200, {"ok": True})

    agent = AgentServer(("127.0.0.1", 0), TOKEN, {("POST", "/watch"): watch}, max_body=contract.MAX_BODY_BYTES, job="j")
    agent.start()
    try:
        yield agent, seen, started
    finally:
        agent.stop()


def send_request(agent: AgentServer, extra: bytes = b"") -> socket.socket:
    sock = socket.create_connection(agent.server_address[:2], timeout=30)
    sock.sendall(b"POST /watch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode() +
                 b"\r\nContent-Length: 2\r\n\r\n{}" + extra)
    return sock


@pytest.mark.parametrize("how", ["close", "reset", "end-writing"])
def test_a_client_that_goes_is_seen(server, how: str):
    agent, seen, started = server
    sock = send_request(agent)
    assert started.wait(30)
    assert seen.get(timeout=30) is False, "a client waiting for its answer is there"
    if how == "reset":
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    elif how == "end-writing":
        sock.shutdown(socket.SHUT_WR)
    else:
        sock.close()
    while seen.get(timeout=30) is False:
        pass
    if how == "end-writing":
        assert b" 200 " in sock.recv(4096), "the answer still goes out"
        sock.close()


def test_a_client_that_sent_more_is_still_there(server):
    agent, seen, started = server
    sock = send_request(agent, extra=b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert started.wait(30)
    assert [seen.get(timeout=30) for _ in range(3)] == [False] * 3
    sock.close()


@pytest.fixture
def watched():
    """A server whose ``POST /watch`` registers an ``on_hang_up`` watcher, then waits for it (or a
    release) before answering."""
    calls: queue.SimpleQueue[str] = queue.SimpleQueue()
    release = threading.Event()
    started = threading.Event()

    def watch(request: Request) -> Response:
        assert request.on_hang_up is not None
        gone = threading.Event()
        request.on_hang_up(lambda: (calls.put(request.body["name"]), gone.set()))
        started.set()
        release.wait(30) if request.body.get("wait") == "release" else gone.wait(30)
        return Response(200, {"ok": True})

    agent = AgentServer(("127.0.0.1", 0), TOKEN, {("POST", "/watch"): watch}, max_body=contract.MAX_BODY_BYTES, job="j")
    agent.start()
    try:
        yield agent, calls, release, started
    finally:
        release.set()
        agent.stop()


def watch_request(name: str, wait: str) -> bytes:
    body = json.dumps({"name": name, "wait": wait}).encode()
    return (b"POST /watch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode() +
            b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)


def test_a_hang_up_watcher_is_called_when_the_client_goes_and_never_after_the_answer(watched):
    agent, calls, release, started = watched
    sock = socket.create_connection(agent.server_address[:2], timeout=30)
    sock.sendall(watch_request("answered", "release"))
    assert started.wait(30)
    release.set()
    assert b" 200 " in sock.recv(4096)
    started.clear()
    sock.sendall(watch_request("gone", "hang-up"))
    assert started.wait(30)
    sock.close()
    assert calls.get(timeout=30) == "gone"
    assert calls.empty(), "the answered request's watcher was not called"
