"""Who talks to whom: flat below the tree threshold, a tree of fixed width at or above it.

Positions are node ranks in the current world (0 is the coordinator). In tree mode the nodes form a
complete ``width``-ary tree in rank order (the heap layout): the children of position ``p`` are
``p*width + 1 .. p*width + width``. Fan-out of calls and aggregation of liveness use the same tree,
so the coordinator only ever talks to at most ``width`` nodes. Standard library only.
"""

from __future__ import annotations

from typing import Optional


def is_tree(nodes: int, threshold: int) -> bool:
    """Whether ``nodes`` nodes use the tree (``nodes >= threshold``)."""
    return nodes >= threshold


def parent(position: int, nodes: int, width: int, threshold: int) -> Optional[int]:
    """The position a node reports to: ``None`` for the root, 0 in flat mode.

    Raises:
        ValueError: ``position`` is outside ``0..nodes-1`` or ``width`` < 1.
    """
    _check(position, nodes, width)
    if position == 0:
        return None
    return (position - 1) // width if is_tree(nodes, threshold) else 0


def children(position: int, nodes: int, width: int, threshold: int) -> list[int]:
    """The positions that report to ``position``, ascending.

    Raises:
        ValueError: ``position`` is outside ``0..nodes-1`` or ``width`` < 1.
    """
    _check(position, nodes, width)
    if not is_tree(nodes, threshold):
        return list(range(1, nodes)) if position == 0 else []
    first = position * width + 1
    return list(range(first, min(first + width, nodes)))


def _check(position: int, nodes: int, width: int) -> None:
    if width < 1:
        raise ValueError(f"tree width must be 1 or more, got {width}")
    if not 0 <= position < nodes:
        raise ValueError(f"position {position} outside 0..{nodes - 1}")


def hops(nodes: int, width: int, threshold: int) -> int:
    """How many hops the deepest node's liveness travels to position 0: 1 when flat, else the tree's
    depth (0 for a lone node).

    Raises:
        ValueError: ``width`` < 1.
    """
    if width < 1:
        raise ValueError(f"tree width must be 1 or more, got {width}")
    if nodes <= 1:
        return 0
    if not is_tree(nodes, threshold):
        return 1
    depth, position = 0, nodes - 1
    while position:
        position = (position - 1) // width
        depth += 1
    return depth
