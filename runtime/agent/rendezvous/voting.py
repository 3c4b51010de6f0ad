"""Asking for votes and answering a candidate or a coordinator's probe: the I/O for ``election``'s
decisions, over the peer transport. Standard library only.

A candidate sends its ``Ballot`` to the other nodes of its last world (``POST /vote``) from a
background thread and hands the answers to the agent's loop as one ``VotesCounted`` event; a node
asked hands the ballot to its loop (``VoteRequested``), where ``Member`` decides, and waits for the
verdict (at most :data:`VOTE_WAIT` seconds) to answer with. A node probed by a coordinator
(``POST /probe``) hands the probe to its loop the same way (``Probed``), so its answer is decided in
order with the ballots (``election.Election.confirm``).
"""

from __future__ import annotations

import json
import threading
from typing import Any, Callable, Optional

from runtime.agent import contract
from runtime.agent.net.peer import Answer, Exchange, PeerTransport
from runtime.agent.rendezvous.actions import AskVotes
from runtime.agent.rendezvous.election import Ballot, Verdict
from runtime.agent.rendezvous.events import Event, Probed, VoteRequested, VotesCounted
from runtime.agent.world import World

VOTE_WAIT = 1.0
"""Seconds a node asked for its vote waits for its loop's verdict (and a candidate for the answers,
plus this much again for the connection)."""


def verdict_json(verdict: Verdict) -> dict[str, Any]:
    """The ``POST /vote`` answer's body."""
    return {"granted": verdict.granted, "reason": verdict.reason, "epoch": verdict.epoch,
            "world": verdict.world.to_json() if verdict.world is not None else None}


def ask(action: AskVotes, transport: PeerTransport, clock: Callable[[], float], events: Callable[[Event], None],
        me: int) -> None:
    """Send ``action.ballot`` to ``action.peers`` in the background; their answers, counted, go to
    ``events`` as one :class:`VotesCounted` (``me``: this node's id, its own vote)."""
    body = json.dumps(action.ballot.to_json()).encode()

    def run() -> None:
        exchanges = [Exchange(n.addr, n.port, "POST", contract.ROUTE_VOTE, body) for n in action.peers]
        answers: list[Answer] = []
        transport.batch(exchanges, clock() + 2 * VOTE_WAIT).run(answers.append)
        granted, seen, newer = [me], 0, None
        for answer in answers:
            if not answer.ok:
                continue
            seen = max(seen, int(answer.body.get("epoch") or 0))
            if answer.body.get("granted") is True:
                granted.append(action.peers[answer.index].node_id)
            newer = _newest(newer, answer.body.get("world"))
        events(VotesCounted(action.ballot, tuple(granted), seen, newer, sum(1 for a in answers if a.ok)))

    threading.Thread(target=run, name="ask-votes", daemon=True).start()


def _newest(known: Optional[World], data: Any) -> Optional[World]:
    if not isinstance(data, dict):
        return known
    try:
        world = World.from_json(data)
    except (KeyError, TypeError, ValueError):
        return known
    return world if known is None or world.order > known.order else known


def answer(ballot: Ballot, events: Callable[[Event], None]) -> Optional[Verdict]:
    """A node asked for its vote: the verdict its loop decides, or ``None`` if it did not within
    :data:`VOTE_WAIT` seconds (the candidate counts no vote)."""
    return _decided(lambda reply: VoteRequested(ballot, reply), events, VOTE_WAIT)


def confirm(prober: int, epoch: int, events: Callable[[Event], None], wait: float) -> Optional[Verdict]:
    """A node probed by coordinator node ``prober`` of ``epoch``: the answer its loop decides, or ``None`` if it did
    not within ``wait`` seconds (the answer then counts for nothing at the coordinator: ``push.Prober``)."""
    return _decided(lambda reply: Probed(prober, epoch, reply), events, wait)


def _decided(event: Callable[[Callable[[Verdict], None]], Event], events: Callable[[Event], None],
             wait: float) -> Optional[Verdict]:
    """Hand ``event`` (made with its reply) to the agent's loop; its verdict, or ``None`` after ``wait`` seconds."""
    decided: list[Verdict] = []
    done = threading.Event()

    def reply(verdict: Verdict) -> None:
        decided.append(verdict)
        done.set()

    events(event(reply))
    done.wait(wait)
    return decided[0] if decided else None
