"""World pushes and probes: the coordinator's I/O for the decisions ``coordinator.Coordinator`` takes.

A world goes to all of its members along the tree (``tree.Layout``: the coordinator sends at most
``tree_fanout`` copies, and every node relays to its own children), and directly to nodes outside it
(told that they were removed). A probe asks a silent or refusing node's agent whether it is up. Both
run in background threads over the peer transport. Standard library only.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import replace
from typing import Callable, Optional, Sequence

from runtime.agent import contract
from runtime.agent.errors import TransportError
from runtime.agent.net.peer import Answer, Exchange, PeerTransport
from runtime.agent.rendezvous.actions import Probe, Push
from runtime.agent.rendezvous.tree import Layout, layout
from runtime.agent.spec.status import TERMINAL
from runtime.agent.world import Node, World

RELAY = "relay"
"""Key of a pushed world's body: ``true`` asks the receiver to send the world on to its tree children."""
PROBE_CONCURRENCY = 32
"""Probes in flight at once from the coordinator, so that many silent nodes make no thundering herd."""
PROBE_IDLE = 5.0
"""Seconds a probe worker waits for another probe before it ends."""
DECIDED = "decided"
"""Key of a probe's answer (``POST /probe``): ``true`` when the node's loop decided it (``voting.confirm``)."""
WITHIN = "within"
"""Key of a probe's body: seconds the coordinator waits for the answer."""
DECIDE_SHARE = 0.5
"""Share of a probe's :data:`WITHIN` the probed node waits for its loop's answer (the rest is the way back)."""


class WorldPusher:
    """Sends worlds to other nodes.

    Args:
        node_id: this node's id.
        transport: the peer transport.
        width: children per node in the tree.
        threshold: members at or above which worlds travel the tree.
        ttl: seconds a push may take (the heartbeat TTL; the node's heartbeat fetches a world it missed).
        clock: monotonic clock, seconds.
        say: writes one line to the agent's log.
        delivered: called with a node that accepted a world, the world's generation and the time.
        refused: called with a node whose connection was refused, or that refused the world as of an older
            epoch (so the coordinator probes it now).
    """

    def __init__(self, *, node_id: int, transport: PeerTransport, width: int, threshold: int, ttl: float,
                 clock: Callable[[], float], say: Callable[[str], None],
                 delivered: Callable[[Node, int, float], None], refused: Callable[[Node], None]) -> None:
        self._node_id = node_id
        self._transport = transport
        self._width = width
        self._threshold = threshold
        self._ttl = ttl
        self._clock = clock
        self._say = say
        self._delivered = delivered
        self._refused = refused
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.sent = 0
        """Worlds other nodes accepted from this one."""

    def tree(self, world: World) -> Layout:
        """The tree over ``world``'s members."""
        return layout(len(world.nodes), width=self._width, threshold=self._threshold)

    def push(self, push: Push) -> bool:
        """Send ``push.world`` to its targets other than this node: along the tree when it goes to all
        the world's members, else directly; directly to targets outside the world.

        Returns:
            Whether this node is a target (the caller takes the world itself).
        """
        world, me = push.world, self._node_id
        others = [n for n in push.targets if n.node_id != me]
        members = {n.node_id for n in push.targets if world.has(n.node_id)}
        if len(members) == len(world.nodes) and self.tree(world).tree:
            self._send(world, self._heads(world), relay=True)
            others = [n for n in others if not world.has(n.node_id)]
        self._send(world, others, relay=False)
        return any(n.node_id == me for n in push.targets)

    def relay(self, world: World) -> None:
        """Send ``world``, received for relaying, on to this node's tree children."""
        if world.has(self._node_id):
            tree = self.tree(world)
            children = tree.children(world.node_rank_of(self._node_id))
            self._send(world, [world.nodes[c] for c in children], relay=True)

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for each push still being sent."""
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout)

    def _heads(self, world: World) -> list[Node]:
        """Where the coordinator sends a world for relaying: the root's children when it is the root
        (as it is unless it failed over), else the root, whose subtree is the whole world."""
        if world.nodes[0].node_id != self._node_id:
            return [world.nodes[0]]
        return [world.nodes[c] for c in self.tree(world).children(0)]

    def _send(self, world: World, targets: Sequence[Node], relay: bool) -> None:
        """Send ``world`` to ``targets`` from one background thread, all at once (a transport batch):
        a thread per target made the receiving handler of a relayed world wait on thread starts."""
        if not targets:
            return
        body = json.dumps({**world.to_json(), RELAY: relay}).encode()
        thread = threading.Thread(target=self._deliver, args=(world, tuple(targets), body), name="push", daemon=True)
        thread.start()
        with self._lock:  # the main loop pushes, the server's loop relays
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]

    def _deliver(self, world: World, targets: tuple[Node, ...], body: bytes) -> None:
        exchanges = [Exchange(n.addr, n.port, "POST", contract.ROUTE_WORLD, body) for n in targets]
        answers: list[Answer] = []
        self._transport.batch(exchanges, self._clock() + self._ttl).run(answers.append)
        now, final = self._clock(), world.status in TERMINAL
        for answer in answers:
            node = targets[answer.index]
            if not answer.ok:
                if final:
                    continue  # the job is over: a node already gone has nothing left to learn
                self._say(f"could not send a world to node {node.node_id} (its heartbeat will fetch it): "
                          f"{answer.problem}")
                if answer.refused or answer.status == 409:
                    self._refused(node)  # gone, or fenced: it holds a newer epoch (the probe learns which)
                continue
            with self._lock:
                self.sent += 1
            self._delivered(node, world.generation, now)


class Prober:
    """Asks a silent or refusing node's agent whether it is up and which epoch it knows (``POST /probe``,
    naming the coordinator and its epoch), from at most :data:`PROBE_CONCURRENCY` worker threads: probes
    queue for them, so hundreds of silent nodes start no thread each (a worker idle for :data:`PROBE_IDLE`
    seconds ends).

    The node's loop decides its answer in order with the ballots it answers (``election.Election.confirm``).
    An answer it did not decide in time (:data:`DECIDED` false: its loop was busy) tells the node's epoch but
    is no proof that the coordinator was heard: it goes to ``answered`` as a confirming probe's failure,
    which loses no node and counts none as heard (the node, still silent, is probed again).

    Args:
        transport: the peer transport.
        timeout: seconds a probe may take unless it says otherwise (``HeartbeatTiming.probe_timeout``).
        answered: called (from a worker thread) with the probe, whether the agent answered, the reason
            (with how it failed), the epoch the node knows (0 without an answer), its
            coordinator's ``(address, port)`` and whether the probe timed out (no answer in time, as opposed to
            refused, reset or answered with an error).
        wait: waits on an event for at most that many seconds; whether it was set: how an idle worker
            waits for another probe (the agent's ``wait`` seam, so a fake clock drives it in tests).
    """

    def __init__(self, transport: PeerTransport, timeout: float,
                 answered: Callable[[Probe, bool, str, int, tuple[str, int], bool], None],
                 wait: Callable[[threading.Event, float], bool] = threading.Event.wait) -> None:
        self._transport = transport
        self._timeout = timeout
        self._answered = answered
        self._wait = wait
        self._pending: deque[Probe] = deque()
        self._lock = threading.Lock()
        self._arrived = threading.Event()
        """Set while a probe is queued (cleared only once the queue is empty), so an idle worker wakes for it."""
        self._workers = 0
        self._idle = 0

    def probe(self, probe: Probe) -> None:
        """Probe ``probe.node`` in the background (queued while every worker is busy)."""
        with self._lock:
            self._pending.append(probe)
            start = len(self._pending) > self._idle and self._workers < PROBE_CONCURRENCY
            if start:
                self._workers += 1
            self._arrived.set()
        if start:
            threading.Thread(target=self._work, name="probe", daemon=True).start()

    def _work(self) -> None:
        while True:
            probe = self._next()
            if probe is None:
                return
            self._probe(probe)

    def _next(self) -> Optional[Probe]:
        """The next queued probe, waiting up to :data:`PROBE_IDLE` seconds for one; ``None``: this worker ends."""
        with self._lock:
            if self._pending:
                return self._pending.popleft()
            self._idle += 1
            self._arrived.clear()
        self._wait(self._arrived, PROBE_IDLE)
        with self._lock:
            self._idle -= 1
            if self._pending:
                return self._pending.popleft()
            self._workers -= 1
            return None

    def _probe(self, probe: Probe) -> None:
        node, timeout = probe.node, probe.timeout or self._timeout
        body = json.dumps({"prober": probe.prober, "epoch": probe.epoch, WITHIN: timeout}).encode()
        exchange = Exchange(node.addr, node.port, "POST", contract.ROUTE_PROBE, body)
        answer = self._transport.exchange(exchange, timeout)
        try:
            info = answer.result(exchange)
        except TransportError as exc:
            self._answered(probe, False, f"{probe.reason}, and a direct probe failed: {exc}", 0, ("", 0),
                           answer.timed_out)
            return
        coordinator = info.get("world_coordinator")
        address = (str(coordinator[1]), int(coordinator[2])) if isinstance(coordinator, list) and \
            len(coordinator) == 3 else ("", 0)
        epoch = int(info.get("epoch") or 1)
        if info.get(DECIDED) is not True:
            self._answered(replace(probe, confirming=True), False, f"{probe.reason}; its agent answered a direct "
                           f"probe without deciding it in time", epoch, address, False)
            return
        self._answered(probe, True, probe.reason, epoch, address, False)
