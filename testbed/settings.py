"""Agent settings for tests and benchmarks, from keyword arguments, with defaults that make a valid agent."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from runtime.agent.spec.agent_settings import AgentSettings, NodeIdentity, Plumbing
from runtime.agent.spec.job import JobSpec

DEFAULTS: dict[str, Any] = {"job_name": "job", "token": "token", "node_id": 0, "coordinator": "127.0.0.1"}
"""What every agent these build gets unless told otherwise (the job spec's defaults for the rest)."""


def agent_settings(**values: Any) -> AgentSettings:
    """Settings of one agent: :data:`DEFAULTS` updated with ``values``, each routed by name to the job
    spec, the node's identity or the plumbing; ``entrypoint`` defaults to ``("train.py",)`` in batch
    mode and nothing in service mode.

    Raises:
        SpecError, ConfigError: a setting is invalid.
        TypeError: a name is none of the three's.
    """
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in {**DEFAULTS, **values}.items()}
    values.setdefault("entrypoint", () if values.get("mode") == "service" else ("train.py",))
    parts = []
    for part in (JobSpec, NodeIdentity, Plumbing):
        names = {f.name for f in fields(part)}
        parts.append(part(**{k: values.pop(k) for k in list(values) if k in names}))
    if values:
        raise TypeError(f"no agent setting is named {sorted(values)}")
    spec, node, plumbing = parts
    return AgentSettings(spec, node, plumbing)
