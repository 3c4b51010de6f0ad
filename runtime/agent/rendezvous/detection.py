"""Which silent nodes the coordinator probes, and how long each probe may take. Pure logic on the
coordinator's monotonic clock; ``coordinator.Coordinator`` holds one :class:`Detection`. Standard
library only.

* A node that beats to the coordinator directly (:func:`heartbeat.reports_to_coordinator`) beats at
  least every cap: quiet past 1.25 caps, it is probed with the rest of two caps, so a stopped agent
  is lost within two beat intervals of its last beat (``HeartbeatTiming.direct_suspect_after``).
* Not while a majority of the world is quiet: the coordinator may be the one cut off, and then the
  TTL's rule and the lease decide (``lease``); a quick probe that fails then loses nothing.
* Any node quiet for ``ttl - probe_timeout`` is probed with the full probe timeout, only the
  topmost silent node of a tree branch (its children's news travels through it).
"""

from __future__ import annotations

from typing import Container, Optional, Sequence

from runtime.agent.rendezvous.election import majority
from runtime.agent.rendezvous.heartbeat import HeartbeatTiming, reports_to_coordinator
from runtime.agent.rendezvous.tree import layout
from runtime.agent.world import Node, World


class Detection:
    """The coordinator's choice of probes.

    Args:
        me: the coordinator's node id.
        interval: the heartbeat interval, seconds.
        ttl: the heartbeat TTL, seconds.
        probe_timeout: the full probe timeout, seconds (a node quiet for ``ttl - probe_timeout`` is probed).
        width: children per node in the tree.
        threshold: members at or above which the tree is used.
    """

    def __init__(self, *, me: int, interval: float, ttl: float, probe_timeout: float, width: int,
                 threshold: int) -> None:
        self._me, self._interval, self._ttl, self._probe_timeout = me, interval, ttl, probe_timeout
        self._width, self._threshold = width, threshold
        self._of: Optional[World] = None
        self._direct: dict[int, Node] = {}
        self._timing = HeartbeatTiming(interval, ttl)

    def direct(self, world: World) -> tuple[HeartbeatTiming, dict[int, Node]]:
        """``world``'s heartbeat timing and its nodes that beat to the coordinator directly, by node id
        (the coordinator's own excluded); computed once per world."""
        if self._of is not world:
            tree = layout(len(world.nodes), width=self._width, threshold=self._threshold)
            self._direct = {n.node_id: n for position, n in enumerate(world.nodes)
                            if n.node_id != self._me and reports_to_coordinator(world, position, tree)}
            self._timing = HeartbeatTiming(self._interval, self._ttl, hops=tree.hops)
            self._of = world
        return self._timing, self._direct

    def quiet_majority(self, world: World, quiet: Sequence[float]) -> bool:
        """Whether the other nodes quiet (``quiet``: seconds, by position) past a direct reporter's
        suspicion form a majority of ``world`` (module docstring)."""
        after = self.direct(world)[0].direct_suspect_after
        count = sum(1 for position, n in enumerate(world.nodes) if n.node_id != self._me and quiet[position] > after)
        return count >= majority(len(world.nodes))

    def probes(self, world: World, quiet: Sequence[float],
               probing: Container[int]) -> list[tuple[Node, str, Optional[float]]]:
        """The nodes to probe now, each with why and its probe's timeout (``None``: the full one), given
        how long each node of ``world`` has been quiet (by position) and those being probed."""
        timing, direct = self.direct(world)
        quick = not self.quiet_majority(world, quiet)
        suspect_after = self._ttl - self._probe_timeout
        silent = [q > suspect_after for q in quiet]
        tree = layout(len(world.nodes), width=self._width, threshold=self._threshold)
        chosen: list[tuple[Node, str, Optional[float]]] = []
        for position, n in enumerate(world.nodes):
            if n.node_id == self._me or n.node_id in probing:
                continue
            if quick and n.node_id in direct and quiet[position] > timing.direct_suspect_after:
                chosen.append((n, f"node {n.node_id} ({n.addr}) sent no heartbeat for "
                                  f"{timing.direct_suspect_after:g} s", timing.direct_probe_timeout))
                continue
            up = tree.parent(position)
            while up and not (silent[up] or world.nodes[up].node_id in probing):
                up = tree.parent(up)
            if silent[position] and not up:  # no silent parent between it and the coordinator
                chosen.append((n, f"node {n.node_id} ({n.addr}) sent no heartbeat for {suspect_after:g} s", None))
        return chosen
