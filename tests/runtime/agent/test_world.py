"""The env contract and the world's rank arithmetic, as pure functions."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from runtime.agent.execution.environment import process_env
from runtime.agent.spec.status import FAILED
from runtime.agent.world import Failure, Node, World

pytestmark = pytest.mark.unit


def world(num_procs: tuple[int, ...] = (2, 2), distribution: str = "spmd", shared_address: bool = False) -> World:
    nodes = tuple(Node(i, "127.0.0.1" if shared_address else f"10.0.0.{i + 1}", 32300 + i, n)
                  for i, n in enumerate(num_procs))
    return World("job", 1, 0, 0, nodes, 29500, distribution)


def test_ranks_are_dense_prefix_sums_in_node_order():
    w = world((2, 3, 1))
    assert w.world_size == 6
    assert [w.first_rank(i) for i in range(3)] == [0, 2, 5]
    envs = [process_env(w, node, local) for node, n in enumerate(w.nodes) for local in range(n.num_proc)]
    assert [int(e["RANK"]) for e in envs] == list(range(6))


@pytest.mark.parametrize(
    ("distribution", "present", "absent"),
    [
        ("pytorch", {"TORCHELASTIC_RUN_ID"}, {"JAX_PROCESS_ID", "TF_CONFIG"}),
        ("jax", {"JAX_PROCESS_ID"}, {"TORCHELASTIC_RUN_ID", "TF_CONFIG"}),
        ("tensorflow", {"TF_CONFIG"}, {"TORCHELASTIC_RUN_ID", "JAX_PROCESS_ID"}),
        ("spmd", {"TORCHELASTIC_RUN_ID", "JAX_PROCESS_ID", "TF_CONFIG"}, set()),
    ],
)
def test_distribution_selects_framework_variables(distribution: str, present: set[str], absent: set[str]):
    env = process_env(world(distribution=distribution), 1, 1)
    assert env["RANK"] == "3" and env["NODE_RANK"] == "1" and env["MASTER_ADDR"] == "10.0.0.1"
    assert present <= set(env)
    assert not absent & set(env)


def test_tf_config_has_one_worker_per_process_with_distinct_ports_per_host():
    cfg = json.loads(process_env(world(), 0, 1)["TF_CONFIG"])
    workers = cfg["cluster"]["worker"]
    assert workers == ["10.0.0.1:29564", "10.0.0.1:29565", "10.0.0.2:29564", "10.0.0.2:29565"]
    assert cfg["task"] == {"type": "worker", "index": 1}


def test_tf_config_ports_count_on_across_nodes_that_share_an_address():
    w = world((2, 3), shared_address=True)
    workers = json.loads(process_env(w, 1, 0)["TF_CONFIG"])["cluster"]["worker"]
    assert workers == [f"127.0.0.1:{29564 + rank}" for rank in range(5)]


@pytest.mark.parametrize("generation", [1, 2, 33])
def test_jax_coordinator_port_is_its_own_and_no_other_process_port(generation: int):
    w = replace(world(distribution="spmd"), generation=generation)
    env = process_env(w, 0, 0)
    host, port = env["JAX_COORDINATOR_ADDRESS"].rsplit(":", 1)
    assert host == env["MASTER_ADDR"]
    assert int(port) == 29532 + (generation - 1) % 32
    tf_ports = {int(a.rsplit(":", 1)[1]) for a in json.loads(env["TF_CONFIG"])["cluster"]["worker"]}
    rendezvous_ports = {replace(w, generation=g).rendezvous_port for g in range(1, 33)}
    assert int(port) not in tf_ports | rendezvous_ports


def test_local_rank_outside_the_node_is_refused():
    with pytest.raises(IndexError):
        process_env(world(), 0, 2)


def test_world_round_trips_through_json_with_its_verdict():
    cause = Failure(rank=3, node_id=1, local_rank=1, exit_code=7, stderr_tail=("boom",), timestamp=1.5, addr="a")
    w = world().finished(FAILED, cause.describe(), 7, cause)
    again = World.from_json(json.loads(json.dumps(w.to_json())))
    assert again == w
    assert "rank 3 (node 1 at a, local rank 1) exited with code 7" in again.message


@pytest.mark.parametrize("patch", [
    {"nodes": []}, {"status": "weird"}, {"generation": "x"},
    {"nodes": [{"node_id": 0, "addr": "10.0.0.1", "port": 1, "num_proc": 1}]},
    {"nodes": [[0, "10.0.0.1", "1", 1]]}, {"nodes": [[True, "10.0.0.1", 1, 1]]}, {"nodes": [[0, "10.0.0.1", 1]]},
])
def test_malformed_world_is_refused(patch: dict):
    data = {**world().to_json(), **patch}
    with pytest.raises((ValueError, KeyError, TypeError)):
        World.from_json(data)


def test_nodes_travel_as_compact_lists():
    data = world().to_json()
    assert all(isinstance(n, list) and len(n) == 4 for n in data["nodes"])
    assert World.from_json(json.loads(json.dumps(data))).nodes == world().nodes


def test_each_generation_gets_its_own_rendezvous_port_within_the_span():
    base = world()
    ports = [replace(base, generation=g).rendezvous_port for g in (1, 2, 3, 33)]
    assert ports == [29500, 29501, 29502, 29500]
    assert process_env(replace(base, generation=2), 0, 0)["MASTER_PORT"] == "29501"
