"""Flat and tree fan-out plans: which node sends a call to which. Pure functions; standard library only.

Below ``tree_threshold`` nodes the coordinator sends the call to every node itself (flat). At or
above it, the other nodes are cut into at most ``tree_fanout`` contiguous runs in node-rank order;
the first node of each run is a child of the coordinator and answers for the whole run, which it
cuts the same way, and so on down. Because runs are contiguous, a node's own ranks followed by its
children's results, in order, are already in rank order, and every subtree is one slice of ranks.
With width w, one level holds w subtrees, so n nodes need about ``1 + log_w(n)`` levels
(13 nodes, width 3: 1 + 3 + 9, three levels; 1,024 nodes, width 50: 1 + 50 + 973, three levels).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


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


def plan_root(targets: Sequence[int], me: int, threshold: int, fanout: int) -> Plan:
    """The coordinator's plan for a call to ``targets`` (node ranks, ascending).

    Args:
        targets: node ranks the call runs on.
        me: the coordinator's node rank (it may or may not be a target).
        threshold: at least this many targets make a tree.
        fanout: children per node in a tree.
    """
    others = [n for n in targets if n != me]
    tree = len(targets) >= threshold
    return Plan(me in targets, tuple(split(others, fanout if tree else max(1, len(others)))), tree)


def plan_node(nodes: Sequence[int], fanout: int) -> Plan:
    """The plan of a node that received an exec for ``nodes`` (itself first)."""
    return Plan(True, tuple(split(nodes[1:], fanout)), len(nodes) > 1)


def levels(count: int, threshold: int, fanout: int) -> int:
    """Levels (the coordinator's included) a call to ``count`` nodes travels, the coordinator a target."""
    if count <= 1:
        return 1
    plan = plan_root(range(count), 0, threshold, fanout)
    return 1 + max(_depth(sub, fanout) for sub in plan.subtrees)


def _depth(nodes: Sequence[int], fanout: int) -> int:
    below = split(nodes[1:], fanout)
    return 1 + (max(_depth(sub, fanout) for sub in below) if below else 0)
