"""The coordinator's half of the fencing rule: when it may act on its world, and when it was fenced
out. Pure logic on the coordinator's monotonic clock; ``coordinator.Coordinator`` holds one
:class:`Lease`. Standard library only.

The nodes' half (``election``) lets a node take over only with the votes of a strict majority of
the last world, each voter having heard nothing from the coordinator for over a TTL. So:

* **Hold.** While the nodes the coordinator has not *heard* (a heartbeat, a report, an accepted
  push, a probe answered in its epoch; never the grace it gives everyone after a stall of its own)
  for ``ttl - margin`` seconds could form such a majority, a rival may be elected, or already be:
  the coordinator holds its decisions (it loses no node, fails nothing, gives no verdict; reports
  wait), and probes those nodes (``POST /probe``). Worlds of fewer than three nodes, and fixed-size
  jobs, never fail over, so their coordinator never holds.
* **A probe answered is a beat.** A node's agent decides its answer in its loop, in order with the
  ballots it answers, and, answering in this coordinator's epoch, votes against it for no rival for
  a TTL (``election.Election.confirm``): longer than the ``ttl - margin`` the answer counts here, as
  the answer arrives within a probe timeout (``margin``). An answer its loop did not decide in time
  counts as none, and loses no node either (``push.Prober``).
* **Fenced out.** A node that answers a probe with a newer epoch deposes the coordinator (a push it
  refuses as older is probed at once): it steps down (``StepDown``); its node stops its ranks and
  registers with the new coordinator. A heartbeat carrying a later epoch (its node voted for another
  candidate) is no proof of life for the lease.
* **After a stall of its own** (neither a tick nor an answered beat for more than a TTL: SIGSTOP, a frozen VM;
  a shorter gap cannot have let a rival be elected, its voters needing a TTL without this coordinator) the
  coordinator reads requests that waited in its socket meanwhile: heartbeats and reports sent before
  their nodes voted for a rival. Until each node has answered a probe sent after the stall, it
  counts as silent whatever it sent (:meth:`Lease.stalled`), so those late reports are held.
* **Release.** Once fewer than a majority are silent again, the decisions held are taken, in order.
* **Give up.** A coordinator that holds for more than a TTL with no majority answering may itself be
  the one cut off: it steps down too, rather than run a world nobody can confirm.
"""

from __future__ import annotations

from typing import Callable, Optional

from runtime.agent.rendezvous.actions import CoordinatorAction, StepDown
from runtime.agent.rendezvous.election import fails_over, majority
from runtime.agent.world import World

Decision = Callable[[], "list[CoordinatorAction]"]
"""A decision held until the lease is confirmed."""


class Lease:
    """Whether a coordinator may act on its world.

    Args:
        node_id: the coordinator's node id.
        epoch: its epoch (``World.epoch`` of every world it freezes).
        ttl: the heartbeat TTL, seconds.
        margin: seconds before the TTL a silent node counts against the lease (the probe timeout):
            a voter waits a whole TTL, so the two never overlap.
        elastic: whether the job may continue without a node (only elastic jobs fail over).
    """

    def __init__(self, node_id: int, *, epoch: int, ttl: float, margin: float, elastic: bool) -> None:
        self.node_id = node_id
        self.epoch = epoch
        self._ttl = ttl
        self._margin = margin
        self._elastic = elastic
        self.deposed: Optional[StepDown] = None
        """Why this coordinator was fenced out, once it was."""
        self._held_since: Optional[float] = None
        self._held: list[Decision] = []
        self._said = False
        self._doubted: set[int] = set()

    def stalled(self, world: World) -> None:
        """The coordinator's host stalled: every other node of ``world`` counts as silent until it
        answers a fresh probe (:meth:`confirmed`; module docstring)."""
        if fails_over(self._elastic, world):
            self._doubted = {n.node_id for n in world.nodes if n.node_id != self.node_id}

    def confirmed(self, node_id: int) -> None:
        """Node ``node_id`` answered a probe sent after the last stall, in this coordinator's epoch."""
        self._doubted.discard(node_id)

    def silent(self, world: World, heard: Callable[[int], float]) -> list[int]:
        """The other nodes of ``world`` not heard for ``ttl - margin`` seconds (``heard(node_id)``: seconds
        since the coordinator last heard it), or not confirmed since a stall."""
        after = self._ttl - self._margin
        return [n.node_id for n in world.nodes
                if n.node_id != self.node_id and (heard(n.node_id) > after or n.node_id in self._doubted)]

    def holding(self, world: World, heard: Callable[[int], float], now: float) -> bool:
        """Whether the coordinator must hold its decisions at ``now`` (module docstring)."""
        if self.deposed is not None:
            return True
        if not fails_over(self._elastic, world):
            return False
        hold = len(self.silent(world, heard)) >= majority(len(world.nodes))
        if hold and self._held_since is None:
            self._held_since = now
        elif not hold:
            self._held_since = None
        return hold

    def newer(self, epoch: int, reason: str, address: tuple[str, int] = ("", 0)) -> bool:
        """A node knows ``epoch``: if it is newer than this coordinator's, it is deposed. Returns
        whether it is (now or before)."""
        if epoch > self.epoch and self.deposed is None:
            self.deposed = StepDown(reason, address)
            self._held = []
        return self.deposed is not None

    def hold(self, decision: Decision) -> None:
        """Keep ``decision`` until the lease is confirmed (dropped if the coordinator is deposed)."""
        if self.deposed is None:
            self._held.append(decision)

    def check(self, holding: bool, now: float) -> list[CoordinatorAction]:
        """After :meth:`holding`: the step-down, once, if deposed or held past a TTL; else, when the
        lease is confirmed, the held decisions' actions."""
        if self.deposed is None and holding and self._held_since is not None and now - self._held_since > self._ttl:
            self.deposed = StepDown(f"no majority of the world answered coordinator node {self.node_id} for "
                                    f"{now - self._held_since:.1f} s (this node may be the one cut off)", ("", 0))
            self._held = []
        if self.deposed is not None:
            if self._said:
                return []
            self._said = True
            return [self.deposed]
        if holding:
            return []
        held, self._held = self._held, []
        return [action for decision in held for action in decision()]
