"""The one-thread concurrent HTTP client: keep-alive reuse, refused connections, deadlines, abort."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from runtime.agent.net.multiplex import Answer, Batch, ConnectionPool, Exchange
from runtime.agent.spec.settings import AgentSettings
from runtime.local import free_port
from testbed.inprocess import LightweightAgent
from tests.conftest import wait_until

TOKEN = "multiplex-token"


@pytest.fixture
def agent() -> Iterator[LightweightAgent]:
    settings = AgentSettings(job="m", token=TOKEN, node_id=0, workers=1, num_proc=1, entrypoint=(),
                             coordinator="127.0.0.1", mode="service")
    served = LightweightAgent(settings, say=lambda _line: None)
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


def run(pool: ConnectionPool, exchanges: list[Exchange], deadline: float | None = None) -> list[Answer]:
    answers: list[Answer] = []
    Batch(pool, exchanges, deadline).run(answers.append)
    return sorted(answers, key=lambda a: a.index)


def test_answers_carry_status_and_body_and_connections_are_kept_alive(agent: LightweightAgent):
    pool = ConnectionPool(TOKEN)
    healthz = Exchange("127.0.0.1", agent.port, "GET", "/healthz")
    info = Exchange("127.0.0.1", agent.port, "GET", "/info")
    bad = Exchange("127.0.0.1", agent.port, "POST", "/exec", json.dumps({"call_id": 1}).encode())
    for _ in range(3):
        answers = run(pool, [healthz])
        assert (answers[0].status, answers[0].body) == (200, {"ok": True})
    assert len(agent.server._open) == 1, "three sequential exchanges must share one connection"
    answers = run(pool, [healthz, info, bad])
    assert [a.status for a in answers] == [200, 200, 400]
    assert answers[1].body["node_id"] == 0
    assert "call_id must be a non-empty string" in answers[2].body["error"]
    assert pool.sent == 6


def test_a_wrong_token_is_answered_401(agent: LightweightAgent):
    answers = run(ConnectionPool("wrong"), [Exchange("127.0.0.1", agent.port, "GET", "/info")])
    assert answers[0].status == 401


def test_a_refused_connection_is_flagged_and_nothing_is_retried():
    pool = ConnectionPool(TOKEN)
    answers = run(pool, [Exchange("127.0.0.1", free_port("127.0.0.1"), "POST", "/exec", b"{}")])
    assert answers[0].status is None and answers[0].refused
    assert "refused" in answers[0].error.lower()


def test_the_deadline_answers_what_is_still_out(agent: LightweightAgent, black_hole: int):
    started = time.monotonic()
    answers = run(ConnectionPool(TOKEN), [Exchange("127.0.0.1", black_hole, "GET", "/info"),
                                          Exchange("127.0.0.1", agent.port, "GET", "/healthz")],
                  deadline=time.monotonic() + 0.3)
    assert 0.25 < time.monotonic() - started < 2.0
    assert answers[0].status is None and answers[0].error == "no answer before the deadline"
    assert answers[1].status == 200


def test_abort_stops_a_batch_at_once_and_answers_nothing_more(black_hole: int):
    answers: list[Answer] = []
    batch = Batch(ConnectionPool(TOKEN), [Exchange("127.0.0.1", black_hole, "GET", "/info")])
    thread = threading.Thread(target=batch.run, args=(answers.append,))
    thread.start()
    batch.abort()
    thread.join(timeout=5)
    assert not thread.is_alive() and answers == []


def test_an_idle_connection_its_server_closed_is_not_reused(agent: LightweightAgent):
    pool = ConnectionPool(TOKEN)
    run(pool, [Exchange("127.0.0.1", agent.port, "GET", "/healthz")])
    agent.server.close_connections()
    assert wait_until(lambda: not agent.server._open, timeout=5)
    assert pool.checkout("127.0.0.1", agent.port) is None
