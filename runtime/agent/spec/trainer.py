"""An agent in a Kubeflow Trainer v2 pod: the Trainer's torchrun arguments checked against the agent's own.

trainplane's ClusterTrainingRuntime sets ``TRAINPLANE_TRAINJOB=true`` on its ``node`` container, and the
Trainer's torch plugin (kubeflow/trainer v2.3.0 ``pkg/runtime/framework/plugins/torch/torch.go``,
``EnforceMLPolicy``) sets ``PET_NNODES`` (the TrainJob's ``numNodes``), ``PET_NPROC_PER_NODE``,
``PET_NODE_RANK`` (the Job completion index), ``PET_MASTER_ADDR`` (``<trainjob>-node-0-0.<trainjob>``) and
``PET_MASTER_PORT`` there. The agent runs from its own settings, which the same ``DistributedJob`` wrote;
when the two disagree the pod was not made as rendered (a hand-edited TrainJob, another runtime), and the
agent stops at once naming both sides rather than run a world the Trainer describes differently. The
``PET_*`` variables never reach the ranks (``contract.AGENT_ONLY_PREFIXES``). Standard library only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from runtime.agent import contract
from runtime.agent.errors import ConfigError

if TYPE_CHECKING:
    from runtime.agent.spec.agent_settings import NodeIdentity
    from runtime.agent.spec.job import JobSpec

TRUE = ("1", "true", "yes", "on")


def in_trainjob(env: Mapping[str, str]) -> bool:
    """Whether the environment is a trainplane TrainJob pod's (``TRAINPLANE_TRAINJOB`` true)."""
    return env.get(contract.TRAINJOB, "").strip().lower() in TRUE


def check_trainer_env(env: Mapping[str, str], spec: JobSpec, node: NodeIdentity) -> None:
    """In a TrainJob pod, check every ``PET_*`` the Trainer sets against the agent's setting of the same thing.

    Args:
        env: the agent's environment.
        spec: the job spec read from it.
        node: this node's identity read from it.

    Raises:
        ConfigError: a ``PET_*`` is unset or disagrees; the message names each disagreeing pair, both
            variables and both values.
    """
    if not in_trainjob(env):
        return
    rank_from = next((name for name in (contract.NODE_RANK_SETTING, contract.JOB_COMPLETION_INDEX, contract.RANK)
                      if env.get(name)), contract.POD_NAME)
    pairs = (
        (contract.PET_NNODES, contract.WORKERS, str(spec.workers)),
        (contract.PET_NPROC_PER_NODE, contract.NUM_PROC, str(spec.num_proc)),
        (contract.PET_NODE_RANK, rank_from, str(node.node_id)),
        (contract.PET_MASTER_ADDR, contract.COORDINATOR_HOST, node.coordinator),
        (contract.PET_MASTER_PORT, contract.MASTER_PORT, str(spec.master_port)),
    )
    missing = [pet for pet, _, _ in pairs if pet not in env]
    if missing:
        raise ConfigError(f"{contract.TRAINJOB}=true but {', '.join(missing)} unset: the Trainer's torch plugin "
                          "sets them on the node container only when the runtime's mlPolicy has torch; use "
                          "trainplane's ClusterTrainingRuntime")
    wrong = [f"{pet}={env[pet]!r} but {own}={value!r}" for pet, own, value in pairs if env[pet].strip() != value]
    if wrong:
        raise ConfigError("the Trainer and this agent describe different jobs: " + "; ".join(wrong)
                          + " (render the TrainJob and the agent's settings from one DistributedJob)")
