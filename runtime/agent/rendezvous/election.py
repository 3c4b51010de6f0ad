"""Choosing a new coordinator when the old one is lost: a node's votes and candidacy. Pure logic on
the node's monotonic clock; ``member.Member`` holds one :class:`Election`. Standard library only.

The fencing rule (the node's half; the coordinator's half is ``lease``):

* A node counts its coordinator lost when its own heartbeats to it failed for more than a TTL
  (``CoordinatorLost``); that alone changes nothing but this node's readiness to vote.
* A takeover needs the votes of a strict majority of the last world's nodes (:func:`majority`:
  ``n // 2 + 1`` of ``n``, the lost coordinator counted against), the candidate's own included. A
  node grants at most one candidate per epoch, and only when it has lost the same coordinator
  itself and the candidate's world is not older than its own (``World.order``). So a node cut off
  alone, or a minority, never takes over, and two candidates never win the same epoch.
* Candidates stand in node order: the lowest node of the world other than the lost coordinator at
  once, the next one TTL later, and so on while no newer world arrives (a double failure: the
  first in line is gone too). A candidate asks again every half TTL, for a later epoch once it has
  seen one.
* Worlds of two nodes never fail over (one vote is not a majority of two): the survivor waits,
  orphaned, for the coordinator to answer again.
* A node that answers its coordinator's probe (``lease``) in that coordinator's epoch or an older one
  is heard by it, as by an answered heartbeat: the coordinator counts it for up to a TTL after the
  answer (``ttl - margin`` after it arrives, within a probe timeout of ``margin``). So for a TTL from
  its answer (:meth:`Election.confirm`) the node grants no ballot against that coordinator, does not
  stand against it, and does not count its own ballot's votes, whatever its heartbeats say; its loss
  is counted again after that, if its heartbeats still fail. The answer is decided in the node's
  loop, in order with the ballots it answers: it knows a vote given before it (its epoch is past the
  coordinator's, which deposes it), and a ballot after it is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from runtime.agent.world import World

MIN_FAILOVER_NODES = 3
"""The fewest nodes a world needs for a takeover: below this, one survivor is no majority."""


def fails_over(elastic: bool, world: World) -> bool:
    """Whether ``world`` may get a new coordinator when its own is lost: an elastic job's world of at
    least :data:`MIN_FAILOVER_NODES` nodes (a fixed-size job, or a smaller world, never fails over)."""
    return elastic and len(world.nodes) >= MIN_FAILOVER_NODES


def majority(nodes: int) -> int:
    """Votes a takeover needs in a world of ``nodes`` nodes: a strict majority, ``nodes // 2 + 1``."""
    return nodes // 2 + 1


@dataclass(frozen=True)
class Ballot:
    """A candidate's request for votes (``POST /vote``).

    Attributes:
        epoch: the epoch the candidate would coordinate.
        candidate: its node id.
        lost: the node id of the coordinator it lost.
        order: its world's ``World.order``.
    """

    epoch: int
    candidate: int
    lost: int
    order: tuple[int, int]

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict."""
        return {"epoch": self.epoch, "candidate": self.candidate, "lost": self.lost, "order": list(self.order)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Ballot:
        """Rebuild from :meth:`to_json`. Raises KeyError, TypeError or ValueError when malformed."""
        epoch, generation = data["order"]
        return cls(int(data["epoch"]), int(data["candidate"]), int(data["lost"]), (int(epoch), int(generation)))


@dataclass(frozen=True)
class Verdict:
    """A voter's answer: ``granted``, or why not (``reason``), with the highest epoch it knows and,
    when its world is newer than the candidate's, that world (the candidate takes it instead)."""

    granted: bool
    reason: str
    epoch: int
    world: Optional[World] = None


class Election:
    """One node's part in choosing a coordinator.

    Args:
        node_id: this node's stable id.
        ttl: the heartbeat TTL, seconds.
    """

    def __init__(self, node_id: int, ttl: float) -> None:
        self.node_id = node_id
        self.ttl = ttl
        self.lost: Optional[tuple[int, float]] = None
        """``(node id of the lost coordinator, monotonic time it was counted lost)``, or ``None``."""
        self.promised = 0
        """The highest epoch this node voted in."""
        self.voted_for: Optional[int] = None
        self._seen = 0
        self._asked_at = float("-inf")
        self._won = 0
        self._heard: dict[int, float] = {}
        """Coordinator node id -> monotonic time until which this node counts itself heard by it (:meth:`confirm`)."""

    def lose(self, coordinator: int, now: float) -> None:
        """This node's heartbeats to ``coordinator`` failed for more than a TTL."""
        if self.lost is None or self.lost[0] != coordinator:
            self.lost = (coordinator, now)
            self._asked_at = float("-inf")

    def settle(self) -> None:
        """The coordinator answers again, or a newer world arrived: nothing is lost."""
        self.lost = None

    def epoch(self, world: Optional[World]) -> int:
        """The epoch a heartbeat of this node carries: its world's, or a later one it gave another
        candidate its vote in (its beats then no longer count for the old coordinator's lease), or won
        (before its own world arrives)."""
        voted = self.promised if self.voted_for not in (None, self.node_id) or self._won == self.promised else 0
        return max(world.epoch if world is not None else 0, voted)

    def heard(self, coordinator: int, now: float) -> bool:
        """Whether this node answered a probe of coordinator node ``coordinator`` less than a TTL before
        ``now`` (:meth:`confirm`): that coordinator may count it heard still."""
        return self._heard.get(coordinator, float("-inf")) > now

    def confirm(self, coordinator: int, epoch: int, world: Optional[World], now: float) -> Verdict:
        """Answer a probe of coordinator node ``coordinator``, of ``epoch`` (module docstring): granted
        with this node's epoch, unless that is past ``epoch`` (this node voted for another candidate,
        or won), which deposes the coordinator. Granted, the answer counts at the coordinator as this
        node heard: :meth:`heard` until a TTL after ``now``."""
        known = self.epoch(world)
        if known > epoch:
            return Verdict(False, f"node {self.node_id} knows epoch {known}, past coordinator node {coordinator}'s "
                                  f"{epoch}", known)
        self._heard[coordinator] = now + self.ttl
        return Verdict(True, "", known)

    def due(self, world: Optional[World], now: float) -> Optional[Ballot]:
        """The ballot to send now, or ``None``: this node has lost its world's coordinator, stands in
        its turn (module docstring) and last asked half a TTL ago or more. Votes for itself."""
        if world is None or self.lost is None or len(world.nodes) < MIN_FAILOVER_NODES:
            return None
        lost, since = self.lost
        if world.coordinator[0] != lost or not world.has(self.node_id):
            return None
        since = max(since, self._heard.get(lost, since))  # heard by it since: lost a TTL after that at the soonest
        line = [n.node_id for n in world.nodes if n.node_id != lost]
        if now < since + line.index(self.node_id) * self.ttl or now - self._asked_at < self.ttl / 2:
            return None
        self._asked_at = now
        epoch = max(world.epoch, self._seen) + 1
        if self.promised > epoch or (self.promised == epoch and self.voted_for != self.node_id):
            epoch = self.promised + 1
        self.promised, self.voted_for = epoch, self.node_id
        return Ballot(epoch, self.node_id, lost, world.order)

    def vote(self, ballot: Ballot, world: Optional[World], now: float) -> Verdict:
        """Answer a candidate's ``ballot`` at ``now`` (module docstring's rule)."""
        known = self.epoch(world)
        if world is None:
            return Verdict(False, f"node {self.node_id} has no world", known)
        if world.order > ballot.order:
            return Verdict(False, f"node {self.node_id} has a newer world (generation {world.generation}, epoch "
                                  f"{world.epoch})", known, world)
        if self.heard(ballot.lost, now):
            return Verdict(False, f"node {self.node_id} answered coordinator node {ballot.lost}'s probe less than a "
                                  f"TTL ago", known)
        if world.coordinator[0] == ballot.lost and (self.lost is None or self.lost[0] != ballot.lost):
            return Verdict(False, f"node {self.node_id} still hears coordinator node {ballot.lost}", known)
        if self.promised > ballot.epoch or (self.promised == ballot.epoch and self.voted_for != ballot.candidate):
            return Verdict(False, f"node {self.node_id} voted for node {self.voted_for} in epoch {self.promised}",
                           known)
        self.promised, self.voted_for = ballot.epoch, ballot.candidate
        return Verdict(True, "", ballot.epoch)

    def counted(self, ballot: Ballot, granted: int, seen: int, world: Optional[World], now: float) -> bool:
        """Whether ``granted`` votes (this node's own included) elect this node for ``ballot`` at
        ``now``: a majority of ``world``'s nodes, while ``world`` is still the one the ballot was for,
        this node has not promised a later epoch since, and the lost coordinator has not heard it
        since (:meth:`heard`). ``seen`` is the highest epoch a voter knew."""
        self._seen = max(self._seen, seen)
        if world is None or world.order != ballot.order or self.promised != ballot.epoch or \
                self.heard(ballot.lost, now) or granted < majority(len(world.nodes)):
            return False
        self._won = ballot.epoch
        return True
