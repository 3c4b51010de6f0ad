"""The one tree: contiguous subtrees, bounded width, every node exactly once, the expected depth; calls,
world relays and heartbeats take the same edges."""

from __future__ import annotations

import pytest

from runtime.agent.rendezvous.tree import Layout, layout, levels, plan_node, plan_root, split

pytestmark = pytest.mark.unit


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
    plan = plan_root(range(count), 0, threshold=threshold, width=fanout)
    assert plan.tree is tree and plan.local
    assert len(plan.subtrees) == children
    reached = [(0, 1)]
    for sub in plan.subtrees:
        reached += walk(sub, fanout, 2)
    assert sorted(n for n, _ in reached) == list(range(count))
    assert max(d for _, d in reached) == depth == levels(count, threshold=threshold, width=fanout)


def test_a_subset_without_the_coordinator_is_sent_everything_and_run_nowhere_else():
    plan = plan_root((2, 5, 6, 9, 11), 0, threshold=4, width=2)
    assert not plan.local and plan.tree
    assert plan.subtrees == ((2, 5, 6), (9, 11))
    assert plan_node((2, 5, 6), 2).subtrees == ((5,), (6,))


def edges_of_a_call_to_every_node(count: int, threshold: int, fanout: int) -> set[tuple[int, int]]:
    """``(parent, child)`` for every hop a call to all ``count`` nodes takes, following the plans."""
    edges = set()

    def visit(parent: int, subtrees: tuple[tuple[int, ...], ...]) -> None:
        for sub in subtrees:
            edges.add((parent, sub[0]))
            visit(sub[0], plan_node(sub, fanout).subtrees)

    visit(0, plan_root(range(count), 0, threshold=threshold, width=fanout).subtrees)
    return edges


@pytest.mark.parametrize(("count", "threshold", "fanout"), [(1, 4, 3), (3, 4, 3), (13, 4, 3), (14, 4, 3), (7, 4, 2),
                                                          (99, 100, 50), (1024, 100, 50), (2552, 100, 50)])
def test_worlds_and_heartbeats_travel_the_edges_a_call_to_every_node_takes(count: int, threshold: int, fanout: int):
    tree = layout(count, width=fanout, threshold=threshold)
    edges = {(tree.parent(p), p) for p in range(1, count)}
    assert edges == edges_of_a_call_to_every_node(count, threshold, fanout)
    assert {(p, c) for p in range(count) for c in tree.children(p)} == edges
    assert tree.parent(0) is None
    assert tree.hops + 1 == levels(count, threshold=threshold, width=fanout)
    assert all(len(tree.children(p)) <= (fanout if tree.tree else count - 1) for p in range(count))


def test_thirteen_nodes_at_width_3_the_shape_the_docs_describe():
    tree = layout(13, width=3, threshold=4)
    assert tree.children(0) == (1, 5, 9)
    assert tree.children(1) == (2, 3, 4) and tree.children(9) == (10, 11, 12)
    assert [tree.parent(p) for p in (4, 5, 12)] == [1, 0, 9]
    assert tree.hops == 2


def test_a_flat_world_reports_straight_to_the_root():
    tree = layout(5, width=2, threshold=100)
    assert not tree.tree and tree.hops == 1
    assert tree.children(0) == (1, 2, 3, 4) and [tree.parent(p) for p in range(1, 5)] == [0, 0, 0, 0]


def test_a_layout_names_a_position_outside_it_and_refuses_empty_or_zero_width_trees():
    with pytest.raises(IndexError, match=r"position 5 outside 0\.\.4"):
        layout(5, width=2, threshold=100).parent(5)
    with pytest.raises(ValueError, match="at least one node"):
        Layout(0, width=2, threshold=1)
    with pytest.raises(ValueError, match="width must be 1 or more"):
        Layout(3, width=0, threshold=1)
