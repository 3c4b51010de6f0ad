"""bench/fanout.py's model for separate hosts: the tree's critical path and the bare round's lower bound.

The model turns costs measured on one machine into latencies on separate hosts (bench/README.md, "Model"); these
tests pin its arithmetic on round numbers, worked out by hand from the tree that ``rendezvous.tree`` plans.
"""

from __future__ import annotations

import pytest

from bench.fanout import Model

pytestmark = pytest.mark.unit

MODEL = Model(base_ms=1.0, hop_ms=0.5, per_child_ms=0.1, per_result_ms=0.01, per_request_ms=0.1)


def test_flat_pays_every_child_and_result_at_the_coordinator():
    # one level: 1 + (0.5 + 0.2) + 999 * 0.1 + 999 * 0.01
    assert MODEL.predict(1000, tree=False, rtt_ms=0.2) == pytest.approx(111.59)


def test_a_width_50_tree_pays_two_levels_at_1000_nodes():
    # the coordinator: 50 children, 999 results relayed; its largest child (20 nodes): 19 children, 19 results
    coordinator = 0.7 + 50 * 0.1 + 999 * 0.01
    largest_child = 0.7 + 19 * 0.1 + 19 * 0.01
    assert MODEL.predict(1000, tree=True, rtt_ms=0.2) == pytest.approx(1.0 + coordinator + largest_child)


def test_the_bare_rounds_bound_is_one_round_trip_and_the_clients_serial_work():
    assert MODEL.predict_bare(1000, rtt_ms=0.2) == pytest.approx(100.2)
    assert MODEL.predict_bare(10_000, rtt_ms=0.0) == pytest.approx(1000.0)
