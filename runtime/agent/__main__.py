"""Pod entrypoint: ``python3 -m runtime.agent [ENTRYPOINT...]``, every setting from the environment
(contract.py); arguments, when given, are the entrypoint (a TrainJob's ``trainer.args``)."""

from __future__ import annotations

import os
import sys
from typing import Sequence

from runtime.agent import contract
from runtime.agent.agent import Agent
from runtime.agent.errors import ConfigError
from runtime.agent.spec.agent_settings import AgentSettings


def main(argv: Sequence[str] = ()) -> int:
    """Read settings from the environment (and the entrypoint from ``argv``, the command-line arguments, if
    any), run the agent, return its exit code: ``EXIT_USAGE`` (2) for settings it cannot run with, naming them."""
    try:
        settings = AgentSettings.from_env(os.environ, argv)
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
    sys.exit(main(sys.argv[1:]))
