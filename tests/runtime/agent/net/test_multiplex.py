"""Batches of exchanges from one thread: keep-alive reuse, refused connections, deadlines, abort."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import pytest

from runtime.agent.net.peer import Answer, Exchange
from runtime.agent.net.transport import HttpTransport
from runtime.local.launch_plan import free_port
from testbed.inprocess import LightweightAgent
from testbed.settings import agent_settings
from tests.conftest import wait_until

pytestmark = pytest.mark.unit

TOKEN = "multiplex-token"
JOB = "m"


@pytest.fixture
def agent() -> Iterator[LightweightAgent]:
    served = LightweightAgent(agent_settings(job_name=JOB, token=TOKEN, mode="service"), say=lambda _line: None)
    served.start()
    yield served
    served.stop()


@pytest.fixture
def black_hole() -> Iterator[int]:
    """A port that accepts connections (in the backlog) and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock.getsockname()[1]


def run(transport: HttpTransport, exchanges: list[Exchange], deadline: float | None = None) -> list[Answer]:
    answers: list[Answer] = []
    transport.batch(exchanges, deadline).run(answers.append)
    return sorted(answers, key=lambda a: a.index)


def test_answers_carry_status_and_body_and_connections_are_kept_alive(agent: LightweightAgent):
    transport = HttpTransport(TOKEN, job=JOB)
    healthz = Exchange("127.0.0.1", agent.port, "GET", "/healthz")
    info = Exchange("127.0.0.1", agent.port, "GET", "/info")
    bad = Exchange("127.0.0.1", agent.port, "POST", "/exec", json.dumps({"call_id": 1}).encode())
    for _ in range(3):
        answers = run(transport, [healthz])
        assert (answers[0].status, answers[0].body) == (200, {"ok": True})
    assert agent.server.open_connections == 1, "three sequential exchanges must share one connection"
    answers = run(transport, [healthz, info, bad])
    assert [a.status for a in answers] == [200, 200, 400]
    assert answers[1].body["node_id"] == 0
    assert "call_id must be a non-empty string" in answers[2].body["error"]
    assert not answers[2].ok and answers[2].problem == "answered 400: call_id must be a non-empty string"
    assert transport.sent == 6


def test_single_and_batched_exchanges_share_the_kept_alive_connections(agent: LightweightAgent):
    transport = HttpTransport(TOKEN, job=JOB)
    healthz = Exchange("127.0.0.1", agent.port, "GET", "/healthz")
    assert transport.exchange(healthz, timeout=5.0).result(healthz) == {"ok": True}
    assert run(transport, [healthz])[0].status == 200
    assert transport.exchange(healthz, timeout=5.0).ok
    assert agent.server.open_connections == 1 and transport.sent == 3


def test_a_wrong_token_is_answered_401(agent: LightweightAgent):
    answers = run(HttpTransport("wrong", job=JOB), [Exchange("127.0.0.1", agent.port, "GET", "/info")])
    assert answers[0].status == 401


def test_a_refused_connection_is_flagged_and_nothing_is_retried():
    nowhere = Exchange("127.0.0.1", free_port("127.0.0.1"), "POST", "/exec", b"{}")
    answers = run(HttpTransport(TOKEN, job=JOB), [nowhere])
    assert answers[0].status is None and answers[0].refused
    assert "refused" in answers[0].error.lower()


def test_the_deadline_answers_what_is_still_out(agent: LightweightAgent, black_hole: int):
    """A fake clock passes the deadline once the live agent has answered: the black hole, which never
    will, is then answered as timed out, without waiting for the deadline in real time."""
    now = [0.0]
    transport = HttpTransport(TOKEN, job=JOB, clock=lambda: now[0])
    answers: list[Answer] = []

    def on_answer(answer: Answer) -> None:
        answers.append(answer)
        now[0] = 100.0

    exchanges = [Exchange("127.0.0.1", black_hole, "GET", "/info"),
                 Exchange("127.0.0.1", agent.port, "GET", "/healthz")]
    transport.batch(exchanges, deadline=60.0).run(on_answer)
    by_index = {a.index: a for a in answers}
    assert by_index[1].status == 200
    assert by_index[0].status is None and by_index[0].timed_out and by_index[0].error == "no answer before the deadline"


def test_abort_stops_a_batch_at_once_and_answers_nothing_more(black_hole: int):
    answers: list[Answer] = []
    batch = HttpTransport(TOKEN, job=JOB).batch([Exchange("127.0.0.1", black_hole, "GET", "/info")])
    thread = threading.Thread(target=batch.run, args=(answers.append,))
    thread.start()
    batch.abort()
    thread.join(timeout=5)
    assert not thread.is_alive() and answers == []


def test_an_abort_from_an_answer_stops_the_answers_already_in_hand(black_hole: int):
    """A hop aborts its batch from its first failure's answer: the answers the batch already holds (two more
    exchanges that failed as they started: no such port) are not handed on, and the batch never started is not."""
    answers: list[Answer] = []
    batch = HttpTransport(TOKEN, job=JOB).batch([Exchange("127.0.0.1", -1, "GET", "/info"),
                                                  Exchange("127.0.0.1", -1, "GET", "/info"),
                                                  Exchange("127.0.0.1", black_hole, "GET", "/info")])

    def first(answer: Answer) -> None:
        answers.append(answer)
        batch.abort()

    batch.run(first)
    assert [a.index for a in answers] == [0] and "cannot reach" in answers[0].error
    batch.run(answers.append)
    assert len(answers) == 1, "an aborted batch sends and answers nothing"


def test_an_idle_connection_its_server_closed_is_not_reused(agent: LightweightAgent):
    transport = HttpTransport(TOKEN, job=JOB)
    healthz = Exchange("127.0.0.1", agent.port, "GET", "/healthz")
    run(transport, [healthz])
    agent.server.close_connections()
    assert wait_until(lambda: not agent.server.open_connections, timeout=5)
    assert run(transport, [healthz])[0].status == 200
    assert transport.exchange(healthz, timeout=5.0).status == 200
    assert agent.server.open_connections == 1
