"""The coordinator's probes (``push.Prober``): many silent nodes are probed by a bounded set of worker
threads, every probe is answered once, and a probe made once the others are done is answered too."""

from __future__ import annotations

import json
import queue
import threading

import pytest

from runtime.agent import contract
from runtime.agent.net.peer import Answer, Exchange
from runtime.agent.rendezvous.actions import Probe
from runtime.agent.rendezvous.push import PROBE_CONCURRENCY, Prober
from runtime.agent.world import Node

pytestmark = pytest.mark.unit


class HeldTransport:
    """Answers every probe (``POST /probe``) with epoch 1, decided, once :attr:`release` is set; counts
    exchanges in flight and keeps them."""

    def __init__(self, decided: bool = True) -> None:
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most_in_flight = 0
        self.decided = decided
        self.sent: list[tuple[Exchange, float]] = []

    def exchange(self, exchange: Exchange, timeout: float) -> Answer:
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            self.sent.append((exchange, timeout))
        self.release.wait(timeout)
        with self.lock:
            self.in_flight -= 1
        return Answer(0, 200, {"epoch": 1, "world_coordinator": [0, "10.0.0.0", 32300], "decided": self.decided})


def probe_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "probe")


def test_hundreds_of_probes_share_a_bounded_pool_of_workers_and_each_is_answered_once():
    transport = HeldTransport()
    answered: list[int] = []
    done = threading.Event()
    count = 10 * PROBE_CONCURRENCY

    def answer(probe: Probe, alive: bool, _reason: str, epoch: int, address: tuple[str, int], _late: bool) -> None:
        assert alive and epoch == 1 and address == ("10.0.0.0", 32300)
        answered.append(probe.node.node_id)
        if len(answered) == count:
            done.set()

    before = probe_threads()
    prober = Prober(transport, 30.0, answer)  # type: ignore[arg-type]  # the transport's exchange is all it uses
    for i in range(count):
        prober.probe(Probe(Node(i, f"10.0.{i // 250}.{i % 250}", 32300, 1), "silent", 1))
    assert probe_threads() - before <= PROBE_CONCURRENCY, "a thread per worker, not per probe"
    transport.release.set()
    assert done.wait(30), f"{len(answered)} of {count} probes answered"
    assert sorted(answered) == list(range(count))
    assert transport.most_in_flight <= PROBE_CONCURRENCY


def test_a_probe_made_after_the_others_were_answered_is_answered_too():
    transport = HeldTransport()
    transport.release.set()
    answered = threading.Semaphore(0)
    prober = Prober(transport, 30.0, lambda *_a: answered.release())  # type: ignore[arg-type]
    prober.probe(Probe(Node(1, "10.0.0.1", 32300, 1), "silent", 1))
    assert answered.acquire(timeout=10)
    prober.probe(Probe(Node(2, "10.0.0.2", 32300, 1), "refused a push", 1))
    assert answered.acquire(timeout=10), "a worker (the idle one, or a new one) took the second probe"


@pytest.mark.parametrize("decided", [True, False])
def test_a_probe_names_its_coordinator_and_an_answer_not_decided_in_time_counts_as_no_answer_but_loses_nobody(
        decided: bool):
    """The node decides its answer in its loop, in order with its ballots (``election.Election.confirm``), so
    the probe names the coordinator, its epoch and how long it waits. An answer the node's loop did not decide
    in time tells its epoch (a newer one still deposes) but proves nothing for the lease: it is answered as a
    confirming probe's failure, which loses no node (``Coordinator.probed``)."""
    transport = HeldTransport(decided)
    transport.release.set()
    answers: list[tuple[Probe, bool, str, int]] = []
    done = threading.Event()

    def answer(probe: Probe, alive: bool, reason: str, epoch: int, _address: tuple[str, int], _late: bool) -> None:
        answers.append((probe, alive, reason, epoch))
        done.set()

    prober = Prober(transport, 30.0, answer)  # type: ignore[arg-type]
    probe = Probe(Node(1, "10.0.0.1", 32300, 1), "silent", 3, timeout=0.75, prober=4, epoch=2)
    prober.probe(probe)
    assert done.wait(10)
    [(exchange, timeout)] = transport.sent
    assert (exchange.method, exchange.path, timeout) == ("POST", contract.ROUTE_PROBE, 0.75)
    assert json.loads(exchange.body or b"{}") == {"prober": 4, "epoch": 2, "within": 0.75}
    [(answered, alive, reason, epoch)] = answers
    assert epoch == 1 and alive is decided
    if decided:
        assert answered == probe
    else:
        assert answered.confirming and answered.generation == 3 and "without deciding it in time" in reason


@pytest.mark.parametrize(("failed", "timed_out"), [
    (Answer(0, None, error="connection refused", refused=True), False),
    (Answer(0, None, error="connection reset by peer"), False),
    (Answer(0, None, error="no answer before the deadline", timed_out=True), True),
])
def test_a_failed_probe_says_whether_it_timed_out(failed: Answer, timed_out: bool):
    """The coordinator loses a suspect only on a refused or reset probe, not on one that timed out
    (``Coordinator.probed``): the prober tells it which."""
    class Failing:
        def exchange(self, _exchange: Exchange, _timeout: float) -> Answer:
            return failed

    answers: queue.SimpleQueue[tuple[bool, str, bool]] = queue.SimpleQueue()
    prober = Prober(Failing(), 30.0,  # type: ignore[arg-type]  # the transport's exchange is all it uses
                    lambda _p, alive, reason, _e, _a, late: answers.put((alive, reason, late)))
    prober.probe(Probe(Node(1, "10.0.0.1", 32300, 1), "node 1 reset a watch", 1, suspicion=True))
    alive, reason, late = answers.get(timeout=10)
    assert not alive and late is timed_out and failed.error in reason
