"""The Trainer's ``PET_*`` checked only in a trainplane TrainJob pod (``TRAINPLANE_TRAINJOB``): a PyTorchJob's
``PET_*`` (the v1 training operator's, e.g. an elastic ``PET_NNODES=1:4``, kubeflow/trainer v1.9.4
``pkg/controller.v1/pytorch/envvar.go``) are not the Trainer's and are left alone."""

from __future__ import annotations

import json

import pytest

from runtime.agent import contract
from runtime.agent.errors import ConfigError
from runtime.agent.spec.agent_settings import AgentSettings

pytestmark = pytest.mark.unit

BASE = {
    contract.JOB_NAME: "demo", contract.TOKEN: "t", contract.WORKERS: "2", contract.NUM_PROC: "2",
    contract.COORDINATOR_HOST: "demo-node-0-0.demo", contract.JOB_COMPLETION_INDEX: "1",
}
PET = {contract.PET_NNODES: "2", contract.PET_NPROC_PER_NODE: "2", contract.PET_NODE_RANK: "1",
       contract.PET_MASTER_ADDR: "demo-node-0-0.demo", contract.PET_MASTER_PORT: "29500"}


def test_outside_a_trainjob_pod_pet_variables_are_not_checked() -> None:
    env = {**BASE, contract.ENTRYPOINT: json.dumps(["train.py"]), contract.PET_NNODES: "1:4"}
    assert AgentSettings.from_env(env).spec.workers == 2


def test_in_a_trainjob_pod_agreeing_pet_variables_pass_and_the_rank_source_is_named_on_a_mismatch() -> None:
    env = {**BASE, **PET, contract.TRAINJOB: "true"}
    assert AgentSettings.from_env(env, ["train.py"]).node.node_id == 1
    with pytest.raises(ConfigError, match="PET_NODE_RANK='0' but JOB_COMPLETION_INDEX='1'"):
        AgentSettings.from_env({**env, contract.PET_NODE_RANK: "0"}, ["train.py"])


def test_the_arguments_are_the_entrypoint() -> None:
    settings = AgentSettings.from_env({**BASE}, ["-m", "pkg.train", "--epochs", "3"])
    assert settings.spec.entrypoint == ("-m", "pkg.train", "--epochs", "3")
    with pytest.raises(ConfigError, match=r"TRAINPLANE_ENTRYPOINT=\[\] is invalid: batch mode needs a command to run; "
                                          "name a script"):
        AgentSettings.from_env({**BASE})
