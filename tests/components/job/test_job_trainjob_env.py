"""The env contract of a TrainJob pod: the pod the runtime and trainplane's patch produce (merged as the Trainer,
JobSet and the Job controller do, ``tests.components.job.trainermerge``, which cites their sources), its
environment resolved as the kubelet would, and the real agent reading it: its settings, the Trainer's ``PET_*``
checked against them (exit 2 naming both), peers found by JobSet's pod names, and no ``PET_*`` in the ranks."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from components.addons.trainer_runtime import cluster_training_runtime
from runtime.agent import contract
from runtime.agent.errors import ConfigError
from runtime.agent.spec.agent_settings import AgentSettings
from runtime.agent.spec.job import default
from runtime.agent.spec.ports import reserved_ports
from runtime.local.launch_plan import free_port
from tests.components.componenttest import TOKEN
from tests.components.job.jobrender import kind_of, render
from tests.components.job.trainermerge import jobset_of, node_pod, resolved_env
from tests.conftest import ROOT

pytestmark = pytest.mark.process

NODE_ADDRESSES = ("127.0.0.2", "127.0.0.3")


def pod_envs(trainjob: dict[str, Any], runtime: dict[str, Any], nodes: int) -> list[dict[str, str]]:
    """Each node pod's resolved environment, node ``i`` at ``NODE_ADDRESSES[i]``."""
    jobset = jobset_of(runtime, trainjob)
    secrets = {(f"{trainjob['metadata']['name']}-token", "token"): TOKEN}
    return [resolved_env(node_pod(jobset, i), NODE_ADDRESSES[i % 2], secrets) for i in range(nodes)]


def the_trainjob(**overrides: Any) -> dict[str, Any]:
    return kind_of(render("demo", backend="trainjob", **overrides), "TrainJob")


RUNTIME = cluster_training_runtime("none", {})


def test_each_node_reads_its_rank_the_coordinator_and_peers_under_jobsets_pod_names() -> None:
    """Node rank from the Job's completion index (``JOB_COMPLETION_INDEX``, kubernetes/kubernetes
    ``pkg/controller/job/indexed_job_utils.go``), the coordinator and peers as ``<job>-node-0-<i>.<job>``: JobSet's
    Job ``<jobset>-node-0`` (kubernetes-sigs/jobset v0.12.0 ``pkg/util/placement/placement.go``) under its headless
    Service named after the JobSet (``pkg/controllers/jobset_controller.go``, ``GetSubdomain``), the name the
    Trainer's own ``PET_MASTER_ADDR`` gives (kubeflow/trainer v2.3.0 ``pkg/runtime/framework/plugins/torch/
    torch.go``), and the entrypoint from the container's args."""
    envs = pod_envs(the_trainjob(workers=3, num_proc=2, args=["--epochs", "3"]), RUNTIME, 3)
    for rank, env in enumerate(envs):
        settings = AgentSettings.from_env(env, ["train.py", "--epochs", "3"])
        assert settings.node.node_id == rank and env[contract.PET_NODE_RANK] == str(rank)
        assert settings.node.coordinator == env[contract.PET_MASTER_ADDR] == "demo-node-0-0.demo"
        assert settings.node.peers == ("demo-node-0-{index}.demo",)
        assert (settings.spec.workers, settings.spec.num_proc, settings.spec.master_port) == (3, 2, 29500)
        assert settings.spec.entrypoint == ("train.py", "--epochs", "3") and settings.token == TOKEN
        assert env[contract.TRAINJOB] == "true" and settings.node.advertise_address == NODE_ADDRESSES[rank % 2]


def hand_edited(trainjob: dict[str, Any], **trainer: Any) -> dict[str, Any]:
    edited = copy.deepcopy(trainjob)
    edited["spec"]["trainer"].update(trainer)
    return edited


@pytest.mark.parametrize(("edit", "named"), [
    ({"numNodes": 3}, ["PET_NNODES='3' but TRAINPLANE_WORKERS='2'"]),
    ({"numProcPerNode": 4}, ["PET_NPROC_PER_NODE='4' but TRAINPLANE_NUM_PROC='2'"]),
    ({"numNodes": 1, "numProcPerNode": 1},
     ["PET_NNODES='1' but TRAINPLANE_WORKERS='2'", "PET_NPROC_PER_NODE='1' but TRAINPLANE_NUM_PROC='2'"]),
])
def test_a_trainer_that_disagrees_with_the_agents_settings_stops_it_with_exit_2_naming_both(
    edit: dict[str, Any], named: list[str], tmp_path: Path
) -> None:
    """A TrainJob whose ``trainer`` no longer says what the agent's settings say (edited by hand) runs the real
    agent (``python -m runtime.agent``) into exit code 2 before it serves, naming each pair of variables."""
    env = pod_envs(hand_edited(the_trainjob(), **edit), RUNTIME, 1)[0]
    result = run_agent(env, ["train.py"], tmp_path)
    assert result.returncode == contract.EXIT_USAGE
    for pair in named:
        assert pair in result.stderr


def test_a_master_address_or_port_other_than_the_agents_is_refused() -> None:
    """kubeflow/trainer v2.3.0 ``torch.go``: ``PET_MASTER_ADDR`` is ``<trainjob>-node-0-0.<trainjob>`` and
    ``PET_MASTER_PORT`` ``constants.ContainerTrainerPort``; another value means another job's or runtime's."""
    env = pod_envs(the_trainjob(), RUNTIME, 1)[0]
    for name, value, own in ((contract.PET_MASTER_ADDR, "other-node-0-0.other", "TRAINPLANE_COORDINATOR="),
                             (contract.PET_MASTER_PORT, "29400", "MASTER_PORT='29500'")):
        with pytest.raises(ConfigError, match=f"{name}={value!r} but {own}"):
            AgentSettings.from_env({**env, name: value}, ["train.py"])


def test_a_runtime_without_the_torch_policy_injects_no_pet_and_the_agent_says_so() -> None:
    """Without ``mlPolicy.torch`` the torch plugin does nothing (``EnforceMLPolicy`` returns at once)."""
    runtime = copy.deepcopy(RUNTIME)
    del runtime["spec"]["mlPolicy"]["torch"]
    env = pod_envs(the_trainjob(), runtime, 1)[0]
    assert not any(name.startswith("PET_") for name in env)
    with pytest.raises(ConfigError, match="PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR, "
                                          "PET_MASTER_PORT unset"):
        AgentSettings.from_env(env, ["train.py"])


def test_an_entrypoint_in_both_the_arguments_and_the_environment_is_refused() -> None:
    """The Trainer's JobSet builder replaces the ``node`` container's args with ``trainer.args``
    (``pkg/runtime/framework/plugins/jobset/builder.go``, ``Trainer``): one entrypoint, never two silently."""
    env = pod_envs(the_trainjob(), RUNTIME, 1)[0]
    with pytest.raises(ConfigError, match="both name an entrypoint"):
        AgentSettings.from_env({**env, contract.ENTRYPOINT: json.dumps(["other.py"])}, ["train.py"])


def run_agent(env: dict[str, str], args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The agent as the pod's container runs it: its command with the merged args, under the pod's env (the
    bundle on ``PYTHONPATH`` is the repository here)."""
    full = {"PATH": os.environ["PATH"], **env, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", contract.AGENT_MODULE, *args], env=full, cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_a_two_node_trainjob_forms_its_world_and_no_pet_reaches_the_ranks(tmp_path: Path) -> None:
    """Two real agents, each with the environment of its TrainJob pod (node 0 at 127.0.0.2, node 1 at
    127.0.0.3, JobSet's host names resolved to them), find each other by JobSet's pod names, form the 2 x 2
    world and run the entrypoint from the container's args; every rank has the contract and none a ``PET_*``
    or a ``TRAINPLANE_*`` setting (``contract.AGENT_ONLY_PREFIXES``)."""
    script = tmp_path / "dump_env.py"
    script.write_text("import json, os, sys\n"
                      "open(os.path.join(sys.argv[1], 'env-' + os.environ['RANK'] + '.json'), 'w')"
                      ".write(json.dumps(dict(os.environ)))\n")
    master_port = default("master_port")  # the agent's port may not fall in the ports the job counts up from it
    port = free_port(NODE_ADDRESSES[0], range(master_port, master_port + reserved_ports(64)))
    trainjob = the_trainjob(script=str(script), args=[str(tmp_path)], agent_port=port, quorum_timeout=60)
    envs = pod_envs(trainjob, RUNTIME, 2)
    resolve = json.dumps({f"demo-node-0-{i}.demo": NODE_ADDRESSES[i] for i in range(2)})
    node = node_pod(jobset_of(RUNTIME, trainjob), 0)["spec"]["containers"][0]
    assert node["command"] == ["python3", "-m", contract.AGENT_MODULE]
    agents = [subprocess.Popen([sys.executable, "-m", contract.AGENT_MODULE, *node["args"]],
                               env={"PATH": os.environ["PATH"], **env, "PYTHONPATH": str(ROOT),
                                    contract.RESOLVE: resolve},
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
              for env in envs]
    outputs = [agent.communicate(timeout=180)[0] for agent in agents]
    assert [agent.returncode for agent in agents] == [0, 0], outputs
    ranks = [json.loads((tmp_path / f"env-{rank}.json").read_text()) for rank in range(4)]
    for rank, env in enumerate(ranks):
        assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]) == (str(rank), "4", str(rank % 2))
        assert env["NODE_RANK"] == str(rank // 2) and env["MASTER_PORT"] == "29500"
        assert env["POD_IPS"] == ",".join(NODE_ADDRESSES)
        leaked = sorted(k for k in env if k.startswith("PET_") or (k.startswith("TRAINPLANE_") and k not in (
            contract.TRAINPLANE_GENERATION, contract.TRAINPLANE_WORLD_FILE, contract.MONITOR_MEMBERS)))
        assert leaked == [], leaked
    assert all(contract.PET_NNODES in env for env in envs)


@pytest.mark.parametrize(("entry", "args"), [
    ({"script": None, "module": "pkg.train"}, ["-m", "pkg.train", "--epochs", "3"]),
    ({"script": None, "command": ["bash", "-c", "echo $RANK"]}, ["bash", "-c", "echo $RANK", "--epochs", "3"]),
])
def test_modules_and_commands_travel_as_the_containers_args_too(entry: dict[str, Any], args: list[str]) -> None:
    """``python3 -m runtime.agent -m pkg.train ...``: Python hands the agent everything after its module name."""
    trainjob = the_trainjob(**entry, args=["--epochs", "3"])
    assert trainjob["spec"]["trainer"]["args"] == args
    settings = AgentSettings.from_env(pod_envs(trainjob, RUNTIME, 1)[0], args)
    assert settings.spec.entrypoint == tuple(args) and settings.spec.no_python is ("command" in entry)
