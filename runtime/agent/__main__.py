"""Pod entrypoint: ``python3 -m runtime.agent``, every setting from the environment (contract.py)."""

from __future__ import annotations

import os
import sys

from runtime.agent import contract
from runtime.agent.agent import Agent
from runtime.agent.errors import ConfigError
from runtime.agent.spec.settings import AgentSettings


def main() -> int:
    """Read settings from the environment, run the agent, return its exit code."""
    try:
        settings = AgentSettings.from_env(os.environ)
    except ConfigError as exc:
        print(f"trainplane agent: {exc}", file=sys.stderr)
        return contract.EXIT_USAGE
    try:
        return Agent(settings).run()
    except OSError as exc:
        node = settings.node
        print(f"trainplane agent: cannot serve on {node.bind_address or '*'}:{node.agent_port}: {exc}", file=sys.stderr)
        return contract.EXIT_RENDEZVOUS


if __name__ == "__main__":
    sys.exit(main())
