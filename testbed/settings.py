"""Agent settings for tests and benchmarks, from keyword arguments, with defaults that make a valid agent."""

from __future__ import annotations

from typing import Any

from runtime.agent.spec.settings import AgentSettings

DEFAULTS: dict[str, Any] = {"job_name": "job", "token": "token", "node_id": 0, "workers": 1, "num_proc": 1,
                            "coordinator": "127.0.0.1"}
"""What every agent these build gets unless told otherwise."""


def agent_settings(**overrides: Any) -> AgentSettings:
    """Settings of one agent: :data:`DEFAULTS` updated with ``overrides`` (any setting by its name;
    ``entrypoint`` defaults to ``("train.py",)`` in batch mode and nothing in service mode).

    Raises:
        ConfigError: a setting is invalid.
    """
    values = {**DEFAULTS, **overrides}
    values.setdefault("entrypoint", () if values.get("mode") == "service" else ("train.py",))
    values["job"] = values.pop("job_name")
    return AgentSettings(**values)
