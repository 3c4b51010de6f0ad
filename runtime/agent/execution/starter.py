"""How the agent starts a rank process: the ``python -c`` program that runs
``runtime.agent.execution.bootstrap`` and the bootstrap's command-line contract (its flag and exit
codes). Kept apart from ``bootstrap`` so the agent, which only spawns ranks, does not import the
rank-side hooks. Standard library only."""

from __future__ import annotations

EXEC_FLAG = "--exec"
"""First bootstrap argument meaning "the rest is a command to run as is"."""
EXIT_NOT_FOUND = 127
EXIT_NOT_EXECUTABLE = 126
"""The shell's exit codes for a command that does not exist, or exists but cannot be run."""


def starter(root: str) -> str:
    """The ``python -c`` program that runs the bootstrap's ``main`` with the ``runtime`` package of ``root``
    (the directory holding it) importable: ``root`` appended to ``sys.path`` unless it is on it."""
    return (f"import sys; root = {root!r}; root in sys.path or sys.path.append(root); "
            "from runtime.agent.execution.bootstrap import main; main()")
