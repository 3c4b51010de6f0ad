"""The agent's peer client on its event loop: a hop's requests to its children, and their answers, are
sent and read by the server's loop, so an ``/exec`` in flight to 200 children takes no thread more
than an idle agent has; the exchanges other threads make (heartbeats, pushes, probes, votes) are sent
and read by the loop too, while the thread that asked waits. Real sockets, a real lightweight agent
or server; the children are one test thread that reads every request and answers only when told."""

from __future__ import annotations

import json
import selectors
import socket
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import Optional

import pytest

from runtime.agent import contract
from runtime.agent.net.flight import Stepper
from runtime.agent.net.peer import Answer, Exchange
from runtime.agent.net.server import AgentServer, Response
from runtime.agent.net.transport import HttpTransport
from runtime.agent.service.drivers import LoopDriver
from runtime.agent.world import Node, World
from testbed.inprocess import LightweightAgent
from testbed.settings import agent_settings
from tests.conftest import wait_until

pytestmark = pytest.mark.unit

TOKEN = "client-loop-token"
JOB = "client-loop"
CHILDREN = 200


class Children:
    """``count`` listening sockets served by one thread: each request is read and held; :meth:`answer`
    answers every one held (and any later) as the child of that port would, with rank = its index + 1."""

    def __init__(self, count: int) -> None:
        self._listeners = []
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sock.listen(16)
            sock.setblocking(False)
            self._listeners.append(sock)
        self.ports = [s.getsockname()[1] for s in self._listeners]
        self._selector = selectors.DefaultSelector()
        for rank, sock in enumerate(self._listeners, start=1):
            self._selector.register(sock, selectors.EVENT_READ, ("listen", rank))
        self._held: list[tuple[socket.socket, int]] = []
        self._lock = threading.Lock()
        self._answering = False
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def held(self) -> int:
        """Requests read completely and not answered."""
        with self._lock:
            return len(self._held)

    def answer(self) -> None:
        with self._lock:
            self._answering = True
            held, self._held = self._held, []
        for sock, rank in held:
            self._reply(sock, rank)

    def close(self) -> None:
        self._stop = True
        self._thread.join(timeout=10)
        for sock in self._listeners:
            sock.close()

    def _serve(self) -> None:
        buffers: dict[socket.socket, bytes] = {}
        while not self._stop:
            for key, _ in self._selector.select(0.1):
                kind, rank = key.data
                if kind == "listen":
                    conn, _ = key.fileobj.accept()  # type: ignore[union-attr]
                    buffers[conn] = b""
                    self._selector.register(conn, selectors.EVENT_READ, ("conn", rank))
                    continue
                conn = key.fileobj  # type: ignore[assignment]
                chunk = conn.recv(1 << 16)
                if not chunk:
                    self._selector.unregister(conn)
                    conn.close()
                    continue
                buffers[conn] += chunk
                head, sep, body = buffers[conn].partition(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0]) if sep else -1
                if sep and len(body) >= length:
                    buffers[conn] = b""
                    with self._lock:
                        if not self._answering:
                            self._held.append((conn, rank))
                            continue
                    self._reply(conn, rank)

    @staticmethod
    def _reply(sock: socket.socket, rank: int) -> None:
        body = json.dumps({"ranks": [rank], "results": [0]}).encode()
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                     % (len(body), body))


@pytest.fixture
def children() -> Iterator[Children]:
    served = Children(CHILDREN)
    yield served
    served.close()


def exec_request(port: int, nodes: list[int], call_id: str, **extra: str) -> socket.socket:
    """Send node 0's ``/exec`` of ``builtins:int`` on ``nodes`` (one subtree per child); the open socket."""
    body = json.dumps({"call_id": call_id, "generation": 1, "invocation": {"fn": "builtins:int"}, "timeout": 60,
                       "nodes": nodes, "fanout": max(1, len(nodes) - 1), **extra}).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    sock.sendall((f"POST {contract.ROUTE_EXEC} HTTP/1.1\r\nAuthorization: Bearer {TOKEN}\r\n"
                  f"{contract.JOB_HEADER}: {JOB}\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body)
    return sock


def answer_of(sock: socket.socket) -> dict:
    data = b""
    while b"\r\n\r\n" not in data or len(data.partition(b"\r\n\r\n")[2]) < int(
            data.lower().split(b"content-length: ")[1].split(b"\r\n")[0]):
        chunk = sock.recv(1 << 20)
        assert chunk, "the agent closed the connection before answering"
        data += chunk
    sock.close()
    return json.loads(data.partition(b"\r\n\r\n")[2])


def test_an_exec_in_flight_to_two_hundred_children_takes_no_thread(children: Children):
    settings = agent_settings(job_name=JOB, token=TOKEN, node_id=0, workers=CHILDREN + 1, mode="service",
                              tree_threshold=1, tree_fanout=CHILDREN)
    agent = LightweightAgent(settings)
    agent.start()
    try:
        agent.join(World(job=JOB, generation=1, restart_count=0, max_restarts=0, master_port=29500,
                         nodes=(Node(0, "127.0.0.1", agent.port, 1),
                                *(Node(i, "127.0.0.1", p, 1) for i, p in enumerate(children.ports, start=1)))))
        assert answer_of(exec_request(agent.port, [0], "alone")) == {"ranks": [0], "results": [0]}
        idle = threading.active_count()
        caller = exec_request(agent.port, list(range(CHILDREN + 1)), "wide")
        assert wait_until(lambda: children.held == CHILDREN, timeout=60), "every child got its request"
        assert threading.active_count() <= idle, "the hop and its 200 requests run on the agent's loop"
        children.answer()
        assert answer_of(caller) == {"ranks": list(range(CHILDREN + 1)), "results": [0] * (CHILDREN + 1)}
    finally:
        agent.stop()


@pytest.fixture
def server() -> Iterator[AgentServer]:
    served = AgentServer(("127.0.0.1", 0), TOKEN, {("GET", contract.ROUTE_HEALTHZ): lambda _r: Response(200, {})},
                         max_body=contract.MAX_BODY_BYTES, job=JOB)
    served.start()
    yield served
    served.stop()


def on_loop(server: AgentServer) -> HttpTransport:
    transport = HttpTransport(TOKEN, job=JOB)
    transport.use_loop(server.loop)
    return transport


def test_a_push_to_two_hundred_peers_from_another_thread_is_sent_and_read_by_the_loop(
        children: Children, server: AgentServer):
    """A world push (a batch run from the coordinator's thread) to 200 peers: while the peers hold their
    requests, the server's loop watches the 200 connections and no thread more than the waiting one
    runs; every answer then reaches that thread, and the connections go back to the pool."""
    transport = on_loop(server)
    exchanges = [Exchange("127.0.0.1", port, "PUT", contract.ROUTE_WORLD, b"{}") for port in children.ports]
    answers: list[Answer] = []
    idle, watched = threading.active_count(), server.loop.watching()
    pusher = threading.Thread(target=lambda: transport.batch(exchanges).run(answers.append))
    pusher.start()
    try:
        assert wait_until(lambda: children.held == CHILDREN, timeout=60), "every peer got its request"
        assert server.loop.watching() == watched + CHILDREN, "the loop sends and reads the 200 exchanges"
        assert threading.active_count() == idle + 1, "only the thread that asked, waiting"
    finally:
        children.answer()
        pusher.join(timeout=60)
    assert sorted(a.body["ranks"][0] for a in answers) == list(range(1, CHILDREN + 1))
    assert all(a.ok for a in answers)
    assert wait_until(lambda: server.loop.watching() == watched, timeout=10), "kept alive, off the loop"
    assert transport.sent == CHILDREN
    transport.close()


def test_an_exchange_waiting_on_a_loop_that_stops_is_answered_with_an_error(children: Children):
    """The agent stops (its loop ends) while a heartbeat waits for a peer that holds it: the waiting
    thread gets an answer that says so, not a wait of the whole timeout or forever."""
    served = AgentServer(("127.0.0.1", 0), TOKEN, {}, max_body=contract.MAX_BODY_BYTES, job=JOB)
    served.start()
    transport = on_loop(served)
    exchange = Exchange("127.0.0.1", children.ports[0], "PUT", contract.ROUTE_MEMBERS, b"{}")
    answers: list[Answer] = []
    beat = threading.Thread(target=lambda: answers.append(transport.exchange(exchange, timeout=600)))
    beat.start()
    assert wait_until(lambda: children.held == 1, timeout=30)
    served.stop()
    beat.join(timeout=30)
    assert not beat.is_alive()
    [answer] = answers
    assert answer.status is None and "event loop stopped" in answer.error and not answer.timed_out
    transport.close()


def test_a_batch_waiting_on_the_loop_ends_at_an_abort_from_another_thread(children: Children, server: AgentServer):
    transport, watched = on_loop(server), server.loop.watching()
    batch = transport.batch([Exchange("127.0.0.1", port, "POST", contract.ROUTE_VOTE, b"{}")
                             for port in children.ports[:3]])
    answers: list[Answer] = []
    voter = threading.Thread(target=lambda: batch.run(answers.append))
    voter.start()
    assert wait_until(lambda: children.held == 3, timeout=30)
    assert server.loop.watching() == watched + 3
    batch.abort()
    voter.join(timeout=30)
    assert not voter.is_alive() and answers == []
    assert wait_until(lambda: server.loop.watching() == watched, timeout=10), "its connections are dropped"
    transport.close()


def test_a_host_name_is_exchanged_by_the_thread_that_asks(server: AgentServer):
    """The loop does not look names up (that would block it); an exchange with a name still works."""
    transport = on_loop(server)
    exchange = Exchange("localhost", server.server_address[1], "GET", contract.ROUTE_HEALTHZ)
    assert transport.exchange(exchange, timeout=10).status == 200
    transport.close()


def test_a_loop_that_stops_closes_the_connections_of_exchanges_still_waiting():
    """The agent stops while a heartbeat is held by its peer: the peer sees the connection end (it is not left
    open, nor registered with a loop that is gone)."""
    served = AgentServer(("127.0.0.1", 0), TOKEN, {}, max_body=contract.MAX_BODY_BYTES, job=JOB)
    served.start()
    transport = on_loop(served)
    with socket.create_server(("127.0.0.1", 0)) as peer:
        exchange = Exchange("127.0.0.1", peer.getsockname()[1], "PUT", contract.ROUTE_MEMBERS, b"{}")
        beat = threading.Thread(target=lambda: transport.exchange(exchange, timeout=600))
        beat.start()
        peer.settimeout(10)
        conn, _ = peer.accept()
        conn.settimeout(10)
        assert conn.recv(65536).startswith(b"PUT ")
        served.stop()
        beat.join(timeout=30)
        assert conn.recv(1) == b"", "the waiting exchange's connection is closed"
        conn.close()
    transport.close()


def test_an_exchange_that_cannot_start_on_the_loop_answers_its_thread_at_once(
        server: AgentServer, monkeypatch: pytest.MonkeyPatch):
    """A bug that makes a batch's start raise on the loop is printed there; the thread that waits is answered
    with it instead of waiting out a deadline (none here)."""
    def broken(*_args: object) -> None:
        raise RuntimeError("broken start")

    monkeypatch.setattr(Stepper, "start", broken)
    transport = on_loop(server)
    answers: list[Answer] = []
    batch = transport.batch([Exchange("127.0.0.1", server.server_address[1], "GET", contract.ROUTE_HEALTHZ)])
    waiter = threading.Thread(target=lambda: batch.run(answers.append))
    waiter.start()
    waiter.join(timeout=30)
    assert not waiter.is_alive()
    [answer] = answers
    assert answer.status is None and "broken start" in answer.error
    transport.close()


def test_a_batch_deadline_on_the_agents_clock_is_kept_on_the_loops(children: Children, server: AgentServer):
    """The batch's deadline is a time of its transport's clock (the agent's), which need not be the loop's: a hop's
    batch started on the loop ends at its deadline, neither never (the agent's clock 1,000 s ahead of the loop's)
    nor at once (1,000 s behind); so does an exchange from another thread, and a hop's timer."""
    def started(skew: float, exchange: Exchange, seconds: float) -> tuple[HttpTransport, list[Answer]]:
        transport = HttpTransport(TOKEN, lambda: time.monotonic() + skew, job=JOB)
        transport.use_loop(server.loop)
        batch = transport.batch([exchange], time.monotonic() + skew + seconds)
        answers: list[Answer] = []
        server.loop.call_soon(lambda: batch.start(server.loop, answers.append))
        return transport, answers

    held = Exchange("127.0.0.1", children.ports[0], "POST", contract.ROUTE_EXEC, b"{}")
    ahead, answers = started(1000.0, held, 0.5)
    assert wait_until(lambda: answers, timeout=30) and answers[0].timed_out and children.held == 1
    answer = ahead.exchange(Exchange("127.0.0.1", children.ports[1], "PUT", contract.ROUTE_MEMBERS, b"{}"), 0.5)
    assert answer.timed_out and children.held == 2
    healthz = Exchange("127.0.0.1", server.server_address[1], "GET", contract.ROUTE_HEALTHZ)
    behind, answers = started(-1000.0, healthz, 60.0)
    assert wait_until(lambda: answers, timeout=30) and answers[0].ok, answers
    ticked = threading.Event()
    driver = LoopDriver(server.loop, lambda: time.monotonic() + 1000.0)
    server.loop.call_soon(lambda: driver.at(time.monotonic() + 1000.0 + 0.2, ticked.set))
    assert ticked.wait(30), "a hop's timer (its tick, its deadline) on the agent's clock fires on the loop's"
    for transport in (ahead, behind):
        transport.close()


def test_an_exec_waiting_in_the_pool_on_a_loop_that_stops_gets_its_thread_back(children: Children):
    """An ``/exec`` that needs the pool first (one with output to relay) runs its hop on the loop and waits for it;
    the agent stops meanwhile: the waiting thread is told, instead of waiting for an answer nothing will send."""
    settings = agent_settings(job_name=JOB, token=TOKEN, node_id=0, workers=2, mode="service")
    agent = LightweightAgent(settings)
    agent.start()
    agent.join(World(job=JOB, generation=1, restart_count=0, max_restarts=0, master_port=29500,
                     nodes=(Node(0, "127.0.0.1", agent.port, 1), Node(1, "127.0.0.1", children.ports[0], 1))))

    def waiting() -> bool:
        """Whether a thread waits in ``ServiceNode._execute``."""
        return any(f.f_code.co_name == "_execute" for top in sys._current_frames().values() for f in _stack(top))

    caller = exec_request(agent.port, [0, 1], "relayed", output="relay-key")
    assert wait_until(lambda: children.held == 1, timeout=60) and waiting()
    agent.stop()
    assert wait_until(lambda: not waiting(), timeout=30), "the pool thread still waits for the stopped loop"
    caller.close()


def _stack(frame: Optional[FrameType]) -> Iterator[FrameType]:
    while frame is not None:
        yield frame
        frame = frame.f_back
