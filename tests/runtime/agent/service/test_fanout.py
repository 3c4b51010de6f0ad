"""Fan-out plans: contiguous subtrees, bounded width, every node exactly once, the expected depth."""

from __future__ import annotations

import pytest

from runtime.agent.service.fanout import levels, plan_node, plan_root, split


def walk(nodes: tuple[int, ...], fanout: int, depth: int = 1) -> list[tuple[int, int]]:
    """``(node, depth)`` for every node a subtree reaches, following plan_node as the agents do."""
    out = [(nodes[0], depth)]
    for sub in plan_node(nodes, fanout).subtrees:
        out += walk(sub, fanout, depth + 1)
    return out


@pytest.mark.parametrize(("count", "width"), [(0, 3), (1, 3), (2, 3), (12, 3), (13, 5), (1023, 50), (7, 7)])
def test_split_is_contiguous_balanced_and_bounded(count: int, width: int):
    nodes = list(range(100, 100 + count))
    runs = split(nodes, width)
    assert [n for run in runs for n in run] == nodes
    assert len(runs) == min(width, count)
    if runs:
        assert max(map(len, runs)) - min(map(len, runs)) <= 1


def test_split_rejects_a_width_below_one():
    with pytest.raises(ValueError, match="width=0"):
        split([1, 2], 0)


@pytest.mark.parametrize(
    ("count", "threshold", "fanout", "tree", "children", "depth"),
    [
        (13, 4, 3, True, 3, 3),
        (3, 4, 3, False, 2, 2),
        (1024, 100, 50, True, 50, 3),
        (99, 100, 50, False, 98, 2),
        (100, 100, 50, True, 50, 3),
        (10_000, 100, 50, True, 50, 4),
    ],
)
def test_root_plan_and_depth(count: int, threshold: int, fanout: int, tree: bool, children: int, depth: int):
    plan = plan_root(range(count), 0, threshold, fanout)
    assert plan.tree is tree and plan.local
    assert len(plan.subtrees) == children
    reached = [(0, 1)]
    for sub in plan.subtrees:
        reached += walk(sub, fanout, 2)
    assert sorted(n for n, _ in reached) == list(range(count))
    assert max(d for _, d in reached) == depth == levels(count, threshold, fanout)


def test_a_subset_without_the_coordinator_is_sent_everything_and_run_nowhere_else():
    plan = plan_root((2, 5, 6, 9, 11), 0, 4, 2)
    assert not plan.local and plan.tree
    assert plan.subtrees == ((2, 5, 6), (9, 11))
    assert plan_node((2, 5, 6), 2).subtrees == ((5,), (6,))
