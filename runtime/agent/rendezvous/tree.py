"""The one tree: who sends calls and worlds to whom, and whom each node's liveness travels through.

Standard library only. Positions are node ranks (0 is the root: the coordinator). Below
``threshold`` members the root talks to every other member itself (flat). At or above it, the
others are cut into at most ``width`` contiguous runs in node-rank order; the first member of each
run is a child of the root and answers for the whole run, which it cuts the same way, and so on
down. Because runs are contiguous, every subtree is one slice of ranks: a node's own results
followed by its children's, in order, are already in rank order, and a call to a subset of the
nodes is planned the same way over just those nodes.

Calls (:func:`plan_root`, :func:`plan_node`), world pushes and heartbeats (:class:`Layout`) travel
it: a call to every node, a world relayed to every member and the liveness aggregated upward take
the same edges, so the root only ever talks to at most ``width`` nodes. With width w, one level
holds w subtrees, so n nodes are about ``1 + log_w(n)`` levels deep and liveness travels one hop
fewer (:attr:`Layout.hops`): 13 nodes at width 3 are 1 + 3 + 9 in three levels (node 0's children
are 1, 5 and 9; node 1's are 2, 3 and 4), two hops; 1,024 nodes at width 50 are 1 + 50 + 973 in
three levels, two hops.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Optional, Sequence


@dataclass(frozen=True)
class Plan:
    """What one node does with a call.

    Attributes:
        local: the node runs the call on its own ranks.
        subtrees: one entry per child, in node-rank order: the node ranks it answers for, itself first.
        tree: the call travels a tree (``False``: the coordinator sends to every node itself).
    """

    local: bool
    subtrees: tuple[tuple[int, ...], ...]
    tree: bool


def is_tree(nodes: int, threshold: int) -> bool:
    """Whether ``nodes`` members use the tree (``nodes >= threshold``) rather than flat."""
    return nodes >= threshold


def split(nodes: Sequence[int], width: int) -> list[tuple[int, ...]]:
    """Cut ``nodes`` into at most ``width`` contiguous runs whose lengths differ by at most one.

    Raises:
        ValueError: ``width`` is below 1.
    """
    if width < 1:
        raise ValueError(f"width={width} is invalid: use 1 or more")
    if not nodes:
        return []
    runs = min(width, len(nodes))
    base, extra = divmod(len(nodes), runs)
    out, start = [], 0
    for i in range(runs):
        size = base + (1 if i < extra else 0)
        out.append(tuple(nodes[start:start + size]))
        start += size
    return out


def plan_root(targets: Sequence[int], me: int, *, threshold: int, width: int) -> Plan:
    """The coordinator's plan for a call to ``targets`` (node ranks, ascending).

    Args:
        targets: node ranks the call runs on.
        me: the coordinator's node rank (it may or may not be a target).
        threshold: at least this many targets make a tree.
        width: children per node in a tree.
    """
    others = [n for n in targets if n != me]
    tree = is_tree(len(targets), threshold)
    return Plan(me in targets, tuple(split(others, width if tree else max(1, len(others)))), tree)


def plan_node(nodes: Sequence[int], fanout: int) -> Plan:
    """The plan of a node that received an exec (or a world to relay) for ``nodes`` (itself first)."""
    return Plan(True, tuple(split(nodes[1:], fanout)), len(nodes) > 1)


def levels(count: int, *, width: int, threshold: int) -> int:
    """Levels (the coordinator's included) a call to ``count`` nodes travels, the coordinator a target."""
    return 1 + layout(count, width=width, threshold=threshold).hops if count > 1 else 1


class Layout:
    """The tree over every position of a world of ``nodes`` members: each one's parent and children.

    Built once per shape (:func:`layout`), in one pass, so a parent or children lookup costs a
    list index however large the world.

    Args:
        nodes: members, ``>= 1``.
        width: children per node in tree mode, ``>= 1``.
        threshold: at least this many members make a tree.

    Raises:
        ValueError: ``nodes`` below 1 or ``width`` below 1.
    """

    def __init__(self, nodes: int, *, width: int, threshold: int) -> None:
        if nodes < 1:
            raise ValueError(f"a tree needs at least one node, got {nodes}")
        if width < 1:
            raise ValueError(f"tree width must be 1 or more, got {width}")
        self.nodes = nodes
        self.tree = is_tree(nodes, threshold)
        self._parent: list[Optional[int]] = [None] * nodes
        self._children: list[tuple[int, ...]] = [()] * nodes
        self._depth = [0] * nodes
        root = plan_root(range(nodes), 0, threshold=threshold, width=width)
        pending = [(0, root.subtrees)]
        while pending:
            position, subtrees = pending.pop()
            self._children[position] = tuple(sub[0] for sub in subtrees)
            for sub in subtrees:
                self._parent[sub[0]] = position
                self._depth[sub[0]] = self._depth[position] + 1
                pending.append((sub[0], plan_node(sub, width).subtrees))

    @property
    def hops(self) -> int:
        """How many hops the deepest member's liveness travels to the root: 1 when flat, else the
        tree's depth (0 for a lone node)."""
        return max(self._depth)

    def parent(self, position: int) -> Optional[int]:
        """The position ``position`` reports to: ``None`` for the root.

        Raises:
            IndexError: ``position`` is outside ``0..nodes-1``.
        """
        return self._parent[self._check(position)]

    def children(self, position: int) -> tuple[int, ...]:
        """The positions that report to (and get worlds and calls from) ``position``, ascending.

        Raises:
            IndexError: ``position`` is outside ``0..nodes-1``.
        """
        return self._children[self._check(position)]

    def _check(self, position: int) -> int:
        if not 0 <= position < self.nodes:
            raise IndexError(f"position {position} outside 0..{self.nodes - 1}")
        return position


@functools.lru_cache(maxsize=64)
def layout(nodes: int, *, width: int, threshold: int) -> Layout:
    """The :class:`Layout` of a world of ``nodes`` members, shared by every caller in this process
    (a thousand in-process agents build it once).

    Raises:
        ValueError: ``nodes`` below 1 or ``width`` below 1.
    """
    return Layout(nodes, width=width, threshold=threshold)
