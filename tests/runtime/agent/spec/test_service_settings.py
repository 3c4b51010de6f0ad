"""Service-mode settings read from the environment: tree shape, pickle opt-in, no entrypoint needed."""

from __future__ import annotations

import pytest

from runtime.agent import contract
from runtime.agent.errors import ConfigError
from runtime.agent.spec.agent_settings import AgentSettings

pytestmark = pytest.mark.unit

BASE = {contract.JOB_NAME: "j", contract.TOKEN: "t", contract.NODE_RANK_SETTING: "0",
        contract.COORDINATOR_HOST: "node-0"}


def test_defaults_and_a_service_job_needs_no_entrypoint():
    settings = AgentSettings.from_env({**BASE, contract.MODE: "service"})
    assert (settings.spec.tree_threshold, settings.spec.tree_fanout, settings.spec.allow_pickle) == (100, 50, False)
    assert settings.spec.entrypoint == ()


def test_values_from_the_environment():
    settings = AgentSettings.from_env({**BASE, contract.MODE: "service", contract.TREE_THRESHOLD: "4",
                                       contract.TREE_FANOUT: "3", contract.ALLOW_PICKLE: "yes"})
    assert (settings.spec.tree_threshold, settings.spec.tree_fanout, settings.spec.allow_pickle) == (4, 3, True)


@pytest.mark.parametrize(("env", "name"), [
    ({contract.TREE_FANOUT: "1"}, contract.TREE_FANOUT),
    ({contract.TREE_THRESHOLD: "0"}, contract.TREE_THRESHOLD),
    ({contract.TREE_FANOUT: "wide"}, contract.TREE_FANOUT),
    ({contract.ALLOW_PICKLE: "maybe"}, contract.ALLOW_PICKLE),
    ({contract.MODE: "batch"}, contract.ENTRYPOINT),
])
def test_bad_values_name_the_variable(env: dict, name: str):
    with pytest.raises(ConfigError, match=name):
        AgentSettings.from_env({**BASE, contract.MODE: "service", **env})
