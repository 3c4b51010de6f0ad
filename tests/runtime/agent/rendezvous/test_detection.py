"""Failure detection from every signal, on a fake clock: a stopped node that beats to the coordinator
directly is lost within two beat caps of its last beat; never on a quick probe while a majority is
quiet (the coordinator may be the one cut off); which nodes the coordinator watches; and the watch
itself over real loopback sockets (``rendezvous.watch``): a refused, reset or ended connection to an
agent port reports the node, nothing is ever sent on it, on the agent's event loop or on one of its own."""

from __future__ import annotations

import queue
import socket
import struct
import threading
from collections.abc import Iterator
from typing import Callable, Optional

import pytest

from runtime.agent.net.loop import EventLoop
from runtime.agent.rendezvous.actions import Probe, Push, Say
from runtime.agent.rendezvous.coordinator import Coordinator
from runtime.agent.rendezvous.heartbeat import HeartbeatTiming
from runtime.agent.rendezvous.watch import Watch
from runtime.agent.spec.status import SUCCEEDED
from runtime.agent.world import Node
from testbed.settings import agent_settings
from tests.conftest import wait_until

pytestmark = pytest.mark.unit


def node(i: int) -> Node:
    return Node(i, f"10.0.0.{i}", 32300, 1)


def coordinator(workers: int = 3, **kw) -> Coordinator:
    """A running world of ``workers`` nodes formed at time 0, TTL 3 s (flat: beat cap 1 s)."""
    settings = agent_settings(job_name="j", token="t", node_id=0, workers=workers, num_proc=1, entrypoint=("x.py",),
                              coordinator="c", heartbeat_ttl=3.0, **kw)
    c = Coordinator(settings, now=0.0)
    for i in range(workers):
        c.register(node(i), 0.0)
    return c


def probes(actions) -> list[Probe]:
    return [a for a in actions if isinstance(a, Probe)]


def test_a_direct_reporter_may_be_quiet_a_quarter_cap_late_and_its_probe_has_the_rest_of_two_caps():
    timing = HeartbeatTiming(0.25, 3.0, hops=1)
    assert timing.cap == 1.0
    assert (timing.direct_suspect_after, timing.direct_probe_timeout) == (1.25, 0.75)
    deep = HeartbeatTiming(0.25, 3.0, hops=2)
    assert deep.direct_suspect_after + deep.direct_probe_timeout == 2 * deep.cap


def test_a_stopped_node_is_probed_quickly_and_lost_two_caps_after_its_last_beat():
    c = coordinator(min_workers=2)
    for t in (0.5, 1.0, 1.5, 2.0):
        c.heartbeat(1, {}, t)
        if t <= 1.0:
            c.heartbeat(2, {}, t)  # node 2 stops after its beat at 1.0
        assert not probes(c.tick(t))
    c.heartbeat(1, {}, 2.25)
    assert not probes(c.tick(2.25)), "1.25 s quiet: not yet"
    [probe] = probes(c.tick(2.26))
    assert probe.node.node_id == 2 and probe.timeout == 0.75 and "no heartbeat for 1.25 s" in probe.reason
    assert not probes(c.tick(2.5)), "one probe at a time"
    [push] = [a for a in c.probed(probe, False, "timed out", 3.0) if isinstance(a, Push)]
    assert [n.node_id for n in push.world.nodes] == [0, 1] and push.world.generation == 2


def test_a_node_that_answers_its_quick_probe_is_kept():
    c = coordinator(min_workers=2)
    c.heartbeat(1, {}, 1.3)
    [probe] = probes(c.tick(1.3))
    assert probe.node.node_id == 2
    assert c.probed(probe, True, probe.reason, 1.5) == []
    assert not probes(c.tick(1.6)) and c.world.generation == 1


def test_no_quick_probe_while_a_majority_is_quiet_and_a_failed_quick_probe_then_loses_nothing():
    """A coordinator cut off from both other nodes hears neither: it may be the one cut off, so it
    waits for the TTL's rule (the lease then holds; test_fencing.py)."""
    c = coordinator(min_workers=2)
    c.heartbeat(1, {}, 1.0)
    [probe] = probes(c.tick(1.3))  # node 2 alone quiet: a quick probe
    assert probe.node.node_id == 2 and probe.timeout == 0.75
    # Node 1 falls quiet too before the probe ends: a majority (2 of 3) is quiet.
    assert c.probed(probe, False, "timed out", 2.3) == []
    assert c.world.generation == 1 and c.world.has(2)
    assert all(p.timeout is None for p in probes(c.tick(2.4))), "only the TTL's probes from here"


def test_the_coordinator_watches_the_nodes_that_beat_to_it_directly():
    assert [n.node_id for n in coordinator().watched()] == [1, 2]
    # Width 3, threshold 4: 13 nodes, the root hears positions 1, 5 and 9 (rendezvous/tree.py).
    tree = coordinator(13, tree_fanout=3, tree_threshold=4)
    assert [n.node_id for n in tree.watched()] == [1, 5, 9]
    c = coordinator()
    c.report(0, 1, SUCCEEDED)
    c.report(1, 1, SUCCEEDED)
    c.report(2, 1, SUCCEEDED)
    assert c.watched() == (), "an ended world is watched no more"


def test_a_refused_suspect_is_probed_at_once_with_the_full_probe_timeout():
    c = coordinator(min_workers=2)
    [probe] = c.suspect(2, "node 2 (10.0.0.2): its agent closed the watch's connection to its agent port")
    assert probe.timeout is None and "closed" in probe.reason and probe.suspicion
    [push] = [a for a in c.probed(probe, False, "refused", 0.2) if isinstance(a, Push)]
    assert [n.node_id for n in push.world.nodes] == [0, 1]


def test_a_suspect_whose_probe_times_out_stays_until_its_heartbeats_stop():
    """A suspicion's probe that gets no answer in time proves nothing the beats do not: a one-way fault (the
    coordinator cannot reach the node, the node's beats still arrive through its parent) stops the probe too.
    Only a refused or reset probe loses the node at once; a timed-out one leaves it to the silence path."""
    c = coordinator(min_workers=2)
    [probe] = c.suspect(2, "node 2 (10.0.0.2): its agent reset the watch's connection")
    [said] = c.probed(probe, False, "node 2 ..., and a direct probe failed: timed out", 0.8, timed_out=True)
    assert isinstance(said, Say) and "stays unless its heartbeats stop" in said.message
    assert c.world is not None and c.world.generation == 1 and c.world.has(2)
    for t in (1.0, 2.0, 3.0, 3.5):  # its beats still arrive (through its parent): nothing is probed or lost
        c.heartbeat(1, {2: 0.1}, t)
        assert probes(c.tick(t)) == [] and c.world.has(2)
    silent = []
    t = 3.5
    while not silent and t < 3.5 + 3.0:  # the beats stop: within a TTL the silence path probes it
        t += 0.25
        c.heartbeat(1, {}, t)
        silent = probes(c.tick(t))
    [probe] = silent
    assert not probe.suspicion
    [push] = [a for a in c.probed(probe, False, "timed out", t + 0.5, timed_out=True) if isinstance(a, Push)]
    assert [n.node_id for n in push.world.nodes] == [0, 1]


# --- the watch, over loopback sockets --------------------------------------------------------------


def listener() -> socket.socket:
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(5.0)
    return server


def local(node_id: int, port: int) -> Node:
    return Node(node_id, "127.0.0.1", port, 1)


@pytest.fixture(params=["its own loop", "the agent's loop"])
def home(request: pytest.FixtureRequest) -> Iterator[Callable[[], Optional[EventLoop]]]:
    """Where a watch runs: a loop of its own, or a running loop standing for the agent's server's."""
    if request.param == "its own loop":
        yield lambda: None
        return
    loop = EventLoop()
    thread = threading.Thread(target=loop.run, args=(lambda: None,), daemon=True)
    thread.start()
    assert wait_until(loop.serving, timeout=10)
    yield lambda: loop
    loop.stop()
    thread.join(timeout=10)


def test_the_watch_reports_a_connection_the_agent_closes_or_resets_and_one_refused(
        home: Callable[[], Optional[EventLoop]]):
    gone: queue.SimpleQueue[tuple[int, str]] = queue.SimpleQueue()
    watch = Watch(lambda n, why: gone.put((n.node_id, why)), retry_after=60.0, loop=home)
    closing, resetting = listener(), listener()
    refusing = listener()
    refused_port = refusing.getsockname()[1]
    refusing.close()
    try:
        watch.follow([local(1, closing.getsockname()[1]), local(2, resetting.getsockname()[1]),
                      local(3, refused_port)])
        assert gone.get(timeout=5.0) == (3, "its agent port refused a connection (Connection refused)")
        watching = any(t.name == "watch" for t in threading.enumerate())
        assert watching == (home() is None), "a thread of its own only without the agent's loop"
        first, _ = closing.accept()
        second, _ = resetting.accept()
        first.settimeout(0.3)
        with pytest.raises(TimeoutError):
            first.recv(1)  # nothing is ever sent on a watch connection
        first.close()
        assert gone.get(timeout=5.0) == (1, "its agent closed the watch's connection to its agent port")
        second.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        second.close()  # a reset, as from a killed process with unread data
        node_id, why = gone.get(timeout=5.0)
        assert node_id == 2 and ("reset" in why or "closed" in why)
        assert gone.empty(), "each failure reported once until the retry"
    finally:
        watch.close()
        closing.close()
        resetting.close()


def test_the_watch_closes_the_connections_of_nodes_it_no_longer_follows(home: Callable[[], Optional[EventLoop]]):
    gone: queue.SimpleQueue[tuple[int, str]] = queue.SimpleQueue()
    watch = Watch(lambda n, why: gone.put((n.node_id, why)), retry_after=60.0, loop=home)
    server = listener()
    try:
        watch.follow([local(1, server.getsockname()[1])])
        conn, _ = server.accept()
        conn.settimeout(5.0)
        watch.follow([])
        assert conn.recv(1) == b"", "the watch hung up"
        conn.close()
        assert gone.empty()
    finally:
        watch.close()
        server.close()


def test_on_the_agents_loop_the_watch_takes_no_thread_and_tries_a_lost_node_again():
    """On the agent's loop, 50 watched ports cost no thread (the loop watches the connections); a node
    whose agent closed its connection is connected again after ``retry_after`` (a loop timer)."""
    loop = EventLoop()
    thread = threading.Thread(target=loop.run, args=(lambda: None,), daemon=True)
    thread.start()
    assert wait_until(loop.serving, timeout=10)
    gone: queue.SimpleQueue[tuple[int, str]] = queue.SimpleQueue()
    watch = Watch(lambda n, why: gone.put((n.node_id, why)), retry_after=0.2, loop=lambda: loop)
    servers = [listener() for _ in range(50)]
    threads = threading.active_count()
    try:
        watch.follow([local(i, s.getsockname()[1]) for i, s in enumerate(servers)])
        accepted = [s.accept()[0] for s in servers]
        assert wait_until(lambda: loop.watching() == 50, timeout=10)
        assert threading.active_count() == threads
        accepted[7].close()
        assert gone.get(timeout=5.0) == (7, "its agent closed the watch's connection to its agent port")
        again, _ = servers[7].accept()  # within the listener's 5 s timeout: the retry came
        again.close()
        for conn in accepted:
            conn.close()
    finally:
        watch.close()
        for s in servers:
            s.close()
        loop.stop()
        thread.join(timeout=10)
    assert not [t for t in threading.enumerate() if t.name == "watch"]
