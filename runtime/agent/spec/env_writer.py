"""The one writer of an agent's environment: the inverse of ``AgentSettings.from_env``.

The local launcher (``runtime.local.jobs``) starts every agent with :func:`agent_env`; the pod renderer
(``components.job.pod``) writes :func:`job_env` into the pod template and adds what only Kubernetes
knows at run time (the node's rank and address, the token from its Secret). Standard library only.
"""

from __future__ import annotations

import json

from runtime.agent import contract
from runtime.agent.spec.address import host_port
from runtime.agent.spec.agent_settings import AgentSettings, NodeIdentity, Plumbing
from runtime.agent.spec.job import SETTINGS, JobSpec


def job_env(spec: JobSpec) -> dict[str, str]:
    """Every setting of ``spec`` that has a value (neither unset nor an empty list), as the variable
    the agent reads it from, encoded as it reads it. Settings at their default are written too, so
    what an agent runs with can be read off its environment; an unset one (``None``) is left to the
    agent's reading of it as unset (``quorum_workers``: every node)."""
    env = {}
    for name, declared in SETTINGS.items():
        value = getattr(spec, name)
        if value is None or (isinstance(value, (tuple, frozenset, str)) and not value):
            continue
        encoded = declared.codec.encode(value)
        if encoded:
            env[declared.env] = encoded
    return env


def identity_env(node: NodeIdentity) -> dict[str, str]:
    """A node's identity as the variables :func:`~runtime.agent.spec.agent_settings.identity_from_env` reads."""
    return {
        contract.NODE_RANK_SETTING: str(node.node_id),
        contract.COORDINATOR_HOST: host_port(node.coordinator, node.coordinator_port),
        contract.AGENT_PORT_SETTING: str(node.agent_port),
        contract.ADVERTISE_ADDRESS: node.advertise_address,
        contract.BIND_ADDRESS: node.bind_address,
        **({contract.PEERS: ",".join(node.peers)} if node.peers else {}),
    }


def plumbing_env(plumbing: Plumbing) -> dict[str, str]:
    """An agent's plumbing as the variables :func:`~runtime.agent.spec.agent_settings.plumbing_from_env` reads."""
    env = {
        contract.TOKEN: plumbing.token,
        contract.DIE_WITH_PARENT: "true" if plumbing.die_with_parent else "false",
        contract.FORWARD_STDIN: "true" if plumbing.forward_stdin else "false",
    }
    if plumbing.resolve:
        env[contract.RESOLVE] = json.dumps(dict(plumbing.resolve))
    if plumbing.verdict_file:
        env[contract.VERDICT_FILE] = plumbing.verdict_file
    if plumbing.run_root:
        env[contract.RUN_ROOT] = plumbing.run_root
    if plumbing.console_file:
        env[contract.CONSOLE_FILE] = plumbing.console_file
    if plumbing.daemon_prefix:
        env[contract.DAEMON_PREFIX] = json.dumps(list(plumbing.daemon_prefix))
    return env


def agent_env(settings: AgentSettings) -> dict[str, str]:
    """Everything an agent reads from its environment: the job, the node, the plumbing."""
    return {**job_env(settings.spec), **identity_env(settings.node), **plumbing_env(settings.plumbing)}
