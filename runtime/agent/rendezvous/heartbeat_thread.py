"""The heartbeat thread: beats to this node's tree parent or the coordinator until the agent stops.

``heartbeat.HeartbeatState`` decides when and where; this thread only waits, sends over the peer
transport and hands the outcome back, so a heartbeat failure can never touch training. Standard
library only.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Mapping, Optional

from runtime.agent import contract
from runtime.agent.net.peer import Exchange, PeerTransport
from runtime.agent.net.transport import encode
from runtime.agent.rendezvous.events import Event
from runtime.agent.rendezvous.heartbeat import TO_COORDINATOR, UPSTREAM, Beat, BeatEffects, HeartbeatState, Liveness
from runtime.agent.rendezvous.nodestate import MemberView
from runtime.agent.rendezvous.stragglers import SubtreeRanks
from runtime.agent.rendezvous.suspicions import SUSPECTS, Suspicions
from runtime.agent.world import Node, World


class Heartbeats:
    """This node's heartbeats.

    Args:
        state: the decisions.
        member: this node's ``PUT /members`` identity (node id, address, port, processes).
        transport: the peer transport.
        view: returns the node's read-only view (``member.MemberView``): its world, whether it is
            registered and coordinates, and the coordinator's ``(address, port)``.
        children: what this node heard from its tree children (forwarded as ages).
        deliver: takes the events an outcome means (to the agent's loop).
        say: writes one line to the agent's log.
        clock: monotonic clock, seconds.
        stopping: set when the agent stops.
        wake: set to beat now (a new world arrived, a suspect to pass up).
        activity: this node's ranks, ``(rank, exit code or None, seconds silent)`` each, sent with
            every beat (``stragglers``).
        subtree: what this node's tree children said of their subtrees' ranks, forwarded with its beats.
        wait: waits on an event for at most that many seconds of ``clock``; whether it was set
            (``threading.Event.wait``: real seconds; an in-memory test's fake clock passes its own).
        handover: takes the suspects (node id to why) held when this node coordinates, which it then probes
            itself (noted just before it took over, or carried back by a beat that failed as it did); whether it
            took them (not when the role is being given up: they are kept for the next beat).
    """

    def __init__(self, *, state: HeartbeatState, member: dict[str, Any], transport: PeerTransport,
                 view: Callable[[], MemberView], children: Liveness, deliver: Callable[[Event], None],
                 say: Callable[[str], None], clock: Callable[[], float], stopping: threading.Event,
                 wake: threading.Event, activity: Callable[[], list[Any]] = list,
                 subtree: Optional[SubtreeRanks] = None,
                 wait: Callable[[threading.Event, float], bool] = threading.Event.wait,
                 handover: Callable[[dict[int, str]], bool] = lambda _held: False) -> None:
        self._state = state
        self._member = member
        self._transport = transport
        self._view = view
        self._children = children
        self._deliver = deliver
        self._say = say
        self._clock = clock
        self._stopping = stopping
        self._wake = wake
        self._suspicions = Suspicions()
        self._activity = activity
        self._subtree = subtree or SubtreeRanks()
        self._wait = wait
        self._handover = handover

    def start(self) -> threading.Thread:
        """Beat from a daemon thread; returns it."""
        thread = threading.Thread(target=self.run, name="heartbeat", daemon=True)
        thread.start()
        return thread

    def suspected(self, suspects: Mapping[int, str]) -> None:
        """Pass ``suspects`` (node id to why: ``suspicions``) up with a beat sent now: this node's own, or its tree
        children's."""
        self._suspicions.merge(suspects)
        self._wake.set()

    def children(self) -> tuple[Node, ...]:
        """The nodes that beat to this node as their tree parent in its running world (none when it beats to
        nobody's children: not in a tree, or coordinating, whose watch is the coordinator's)."""
        view = self._view()
        return () if view.coordinating or view.world is None else self._state.children(view.world)

    def run(self) -> None:
        """Beat until the agent stops. Never raises."""
        while True:
            self._wait(self._wake, self._state.delay())
            self._wake.clear()
            if self._stopping.is_set():
                return
            view = self._view()
            held = self._suspicions.take() if view.coordinating else {}
            if held and not self._handover(held):
                self._suspicions.merge(held)  # the role is being given up: for the next beat, without a wake
            beat = self._state.next(view.world, view.registered, view.coordinating, self._clock())
            if beat is not None:
                self._handle(self._send(beat, view), view.world)

    def _send(self, beat: Beat, view: MemberView) -> tuple[Beat, Exchange, Any, dict[int, str]]:
        host, port = (beat.parent.addr, beat.parent.port) if beat.parent is not None else view.coordinator
        world = view.world
        now = self._clock()
        ages = {}
        if beat.ages and world is not None:
            ages = {k: round(v, 3) for k, v in self._children.ages(now).items() if world.has(k)}
        body = {**self._member, "generation": beat.generation, "state": "alive", "ages": ages, "epoch": view.epoch,
                TO_COORDINATOR: beat.parent is None}
        body["ranks"] = [[rank, code, round(silent, 3)] for rank, code, silent in self._activity()]
        if beat.ages and world is not None:
            body["subtree_ranks"] = self._subtree.forward(now, world.has)
        suspects = self._suspicions.take()
        if suspects:
            body[SUSPECTS] = {str(k): v for k, v in suspects.items()}
        exchange = Exchange(host, port, "PUT", contract.ROUTE_MEMBERS, encode(body))
        return beat, exchange, self._transport.exchange(exchange, self._state.timing.cap), suspects

    def _handle(self, sent: tuple[Beat, Exchange, Any, dict[int, str]], world: Optional[World]) -> None:
        beat, exchange, answer, suspects = sent
        if not answer.ok:
            self._suspicions.merge(suspects)  # for the next beat, wherever it goes
        if answer.membership_refused:
            effects = self._state.refused(beat, answer.problem)
        elif not answer.ok:
            where = f"{exchange.host}:{exchange.port}"
            effects = self._state.failed(beat, world, where, answer.problem, self._clock())
        else:
            effects = self._state.answered(beat, self._world_in(answer.body), self._clock(),
                                           upstream=_seconds(answer.body.get(UPSTREAM)))
        self._tell(effects)

    def _world_in(self, reply: dict[str, Any]) -> Optional[World]:
        if "world" not in reply:
            return None
        try:
            return World.from_json(reply["world"])
        except (KeyError, TypeError, ValueError) as exc:
            self._say(f"ignoring a malformed world in a heartbeat reply: {exc!r}")
            return None

    def _tell(self, effects: BeatEffects) -> None:
        for line in effects.lines:
            self._say(line)
        for event in effects.events:
            self._deliver(event)


def _seconds(value: object) -> Optional[float]:
    """A parent's ``upstream_s``: a finite number of seconds >= 0, else ``None`` (absent: the coordinator's
    answers, or a parent not in this node's world; a malformed one says nothing either)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < float("inf"):
        return float(value)
    return None
