"""Which ranks get ``TRAINPLANE_JOIN_TIMEOUT`` (their new worlds' ranks wait that long for a joining node's, see
``runtime.agent.execution.torchhooks``): those of an elastic torch batch job, set to its quorum timeout; no
fixed-size job's, no other framework's, no command's (``no_python``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime.agent import contract
from runtime.agent.execution.generation import NodeProcesses
from runtime.agent.spec.agent_settings import AgentSettings
from runtime.agent.world import Node, World

pytestmark = pytest.mark.unit

BASE = {contract.JOB_NAME: "j", contract.TOKEN: "t", contract.NODE_RANK_SETTING: "0",
        contract.COORDINATOR_HOST: "node-0", contract.ENTRYPOINT: '["train.py"]', contract.NUM_PROC: "2",
        contract.QUORUM_TIMEOUT: "120", contract.MIN_WORKERS: "1", contract.MAX_WORKERS: "2",
        contract.DISTRIBUTION: "pytorch"}


class Recorded:
    """A spawner that keeps each rank's environment and starts nothing."""

    def __init__(self) -> None:
        self.envs: list[dict[str, str]] = []
        self.generation = 1

    def __call__(self, *, envs: list[dict[str, str]], **__: Any) -> Recorded:
        self.envs = envs
        return self

    def start(self) -> None:
        """Nothing to start."""

    def stop(self, grace: float, sig: int = 15) -> None:
        """Nothing to stop."""


def join_timeouts(tmp_path: Path, **changes: str) -> list[str | None]:
    """Each rank's ``TRAINPLANE_JOIN_TIMEOUT`` (``None``: unset) for an agent of these settings."""
    env = {k: v for k, v in {**BASE, **changes}.items() if v}
    settings = AgentSettings.from_env({**env, contract.RUN_ROOT: str(tmp_path)})
    spawner = Recorded()
    processes = NodeProcesses(settings=settings, spawner=spawner, say=lambda _line: None, on_exit=lambda _e: None,
                              on_daemon_exit=lambda _n, _e: None, environ={})
    world = World(job="j", generation=1, restart_count=0, max_restarts=0, master_port=29500,
                  nodes=(Node(0, "10.0.0.0", 32300, 2), Node(1, "10.0.0.1", 32300, 2)), distribution=env[
                      contract.DISTRIBUTION])
    try:
        processes.start(world)
    finally:
        processes.close()
    return [e.get(contract.JOIN_TIMEOUT) for e in spawner.envs]


def test_the_ranks_of_an_elastic_torch_batch_job_wait_for_joiners_up_to_its_quorum_timeout(tmp_path: Path) -> None:
    assert join_timeouts(tmp_path) == ["120", "120"]
    assert join_timeouts(tmp_path, **{contract.DISTRIBUTION: "spmd"}) == ["120", "120"]


@pytest.mark.parametrize("changes", [
    {contract.MIN_WORKERS: "", contract.MAX_WORKERS: ""},  # fixed size: every rank starts together
    {contract.DISTRIBUTION: "jax"},
    {contract.NO_PYTHON: "true"},
])
def test_no_other_job_gets_it(tmp_path: Path, changes: dict[str, str]) -> None:
    assert join_timeouts(tmp_path, **changes) == [None, None]
