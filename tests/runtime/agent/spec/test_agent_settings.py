"""Agent settings from the environment: node identity sources and clear errors."""

from __future__ import annotations

import json
import re

import pytest

from runtime.agent import contract
from runtime.agent.errors import ConfigError
from runtime.agent.spec.agent_settings import AgentSettings

pytestmark = pytest.mark.unit

BASE = {
    contract.JOB_NAME: "j", contract.TOKEN: "t", contract.WORKERS: "4",
    contract.ENTRYPOINT: json.dumps(["train.py"]), contract.COORDINATOR_HOST: "j-0.j",
}


@pytest.mark.parametrize(
    ("extra", "node_id"),
    [
        ({contract.NODE_RANK_SETTING: "2"}, 2),
        ({contract.JOB_COMPLETION_INDEX: "3"}, 3),
        ({contract.POD_NAME: "myjob-worker-1"}, 1),
        ({contract.RANK: "2"}, 2),
        ({contract.POD_NAME: "ddp-worker-0", contract.RANK: "1"}, 1),
    ],
)
def test_node_identity_sources(extra: dict, node_id: int):
    assert AgentSettings.from_env({**BASE, **extra}).node.node_id == node_id


def test_pytorchjob_falls_back_to_the_operators_master_addr():
    env = {k: v for k, v in BASE.items() if k != contract.COORDINATOR_HOST}
    s = AgentSettings.from_env({**env, contract.MASTER_ADDR: "job-master-0", contract.RANK: "1"})
    assert s.node.coordinator == "job-master-0" and s.node.coordinator_port == contract.AGENT_PORT


def test_loopback_pod_ip_binds_only_that_address_and_pod_ip_binds_all():
    local = AgentSettings.from_env({**BASE, contract.NODE_RANK_SETTING: "0", contract.POD_IP: "127.0.0.5"})
    assert local.node.bind_address == "127.0.0.5" and local.node.advertise_address == "127.0.0.5"
    pod = AgentSettings.from_env({**BASE, contract.NODE_RANK_SETTING: "0", contract.POD_IP: "10.1.2.3"})
    assert pod.node.bind_address == "" and pod.node.advertise_address == "10.1.2.3"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({contract.NODE_RANK_SETTING: "4"},
         "TRAINPLANE_NODE_RANK=4 is invalid: must be from 0 to 3; use a node rank from 0 to 3"),
        ({contract.NODE_RANK_SETTING: "x"},
         "TRAINPLANE_NODE_RANK='x' is invalid: must be a whole number; write it in digits, e.g. 4"),
        ({}, "cannot tell this node's rank"),
        ({contract.NODE_RANK_SETTING: "0", contract.QUORUM_WORKERS: "5"}, "TRAINPLANE_QUORUM_WORKERS=5"),
        ({contract.NODE_RANK_SETTING: "0", contract.ENTRYPOINT: "train.py"},
         "TRAINPLANE_ENTRYPOINT='train.py' is invalid: is not JSON; use a JSON list of strings, e.g. [\"train.py\", "
         "\"--epochs=2\"]"),
        ({contract.NODE_RANK_SETTING: "0", contract.DAEMON_PREFIX: '"/opt/wrapper"'},
         "TRAINPLANE_DAEMON_PREFIX='\"/opt/wrapper\"' is invalid: must be a JSON list of strings; use a JSON list"),
        ({contract.NODE_RANK_SETTING: "0", contract.RESOLVE: '{"node-1": 5}'},
         "TRAINPLANE_RESOLVE='{\"node-1\": 5}' is invalid: must map host names to addresses; use an object of host "
         "name to address, e.g. {\"node-0\": \"10.0.0.5\"}"),
        ({contract.NODE_RANK_SETTING: "0", contract.DISTRIBUTION: "mpi"},
         "use one of spmd, pytorch, jax, tensorflow, ray, monarch"),
        ({contract.NODE_RANK_SETTING: "0", contract.MONITOR_MEMBERS: "maybe"},
         "TRAINPLANE_MONITOR_MEMBERS='maybe' is invalid: must be true or false; use true or false"),
        ({contract.NODE_RANK_SETTING: "0", contract.MASTER_PORT: "0"},
         "MASTER_PORT=0 is invalid: 0 picks a free port when a job starts on one machine, and every node must know "
         "node 0's port in advance; use a TCP port from 1 to 65535"),
        ({contract.NODE_RANK_SETTING: "0", contract.MODE: "service", contract.NO_PYTHON: "true"},
         "TRAINPLANE_NO_PYTHON=true is invalid: runs a command, and service mode runs none; unset it in service mode"),
        ({contract.NODE_RANK_SETTING: "0", contract.DISTRIBUTION: "ray", contract.NUM_PROC: "2"},
         "TRAINPLANE_NUM_PROC=2 is invalid: a ray job runs one driver process, on node 0, and ray's own workers on "
         "every node; set TRAINPLANE_NUM_PROC to 1"),
        ({contract.NODE_RANK_SETTING: "0", contract.DISTRIBUTION: "monarch", contract.MIN_WORKERS: "2",
          contract.MAX_WORKERS: "4"}, "TRAINPLANE_MIN_WORKERS=2 is invalid: a monarch job cannot be elastic (its head "
         "is node 0); unset TRAINPLANE_MIN_WORKERS and TRAINPLANE_MAX_WORKERS"),
        ({contract.NODE_RANK_SETTING: "0", contract.DISTRIBUTION: "monarch", contract.DAEMON_ARGS: '["--num-cpus=1"]'},
         "TRAINPLANE_DAEMON_ARGS=['--num-cpus=1'] is invalid: applies to TRAINPLANE_DISTRIBUTION ray only: the "
         "arguments go to `ray start` (got TRAINPLANE_DISTRIBUTION monarch); unset TRAINPLANE_DAEMON_ARGS, or use "
         "TRAINPLANE_DISTRIBUTION ray"),
        ({contract.NODE_RANK_SETTING: "0", contract.DISTRIBUTION: "ray", contract.DAEMON_ARGS: "--num-cpus=1"},
         "TRAINPLANE_DAEMON_ARGS='--num-cpus=1' is invalid: is not JSON"),
    ],
)
def test_bad_settings_name_the_variable(extra: dict, message: str):
    with pytest.raises(ConfigError, match=re.escape(message)):
        AgentSettings.from_env({**BASE, **extra})


def test_no_python_is_read_from_the_environment():
    env = {**BASE, contract.NODE_RANK_SETTING: "0", contract.ENTRYPOINT: json.dumps(["/opt/train", "--fast"])}
    assert not AgentSettings.from_env(env).spec.no_python
    command = AgentSettings.from_env({**env, contract.NO_PYTHON: "true"})
    assert command.spec.no_python and command.spec.entrypoint == ("/opt/train", "--fast")


@pytest.mark.parametrize(("distribution", "node_id", "local"), [
    ("ray", 0, 1), ("ray", 2, 0), ("monarch", 0, 1), ("monarch", 1, 0), ("spmd", 2, 1),
])
def test_single_controller_nodes_run_the_driver_on_node_0_only(distribution: str, node_id: int, local: int):
    s = AgentSettings.from_env({**BASE, contract.NODE_RANK_SETTING: str(node_id), contract.DISTRIBUTION: distribution})
    assert s.local_world_size == local and s.spec.num_proc == 1
