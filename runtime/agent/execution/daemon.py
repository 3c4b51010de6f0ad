"""Become a framework daemon: ``python -m runtime.agent.execution.daemon NAME COMMAND [ARGS...]``.

The agent runs this under the bootstrap (so the daemon dies with the agent and, for a Ray worker,
starts only once the head answers); it then replaces itself with COMMAND, so the agent's signals
reach the daemon itself. A COMMAND without a slash is looked up beside the interpreter first (the
environment that runs the driver, so that driver and cluster run the same Ray), then on ``PATH``.
One that cannot be found ends the process with exit code 127 and one line naming it, which the
agent's failure report quotes. Standard library only.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Optional, Sequence

from runtime.agent.execution import delivery
from runtime.agent.execution.starter import EXIT_NOT_FOUND


def resolve(command: str, python: str = sys.executable, path: Optional[str] = None) -> Optional[str]:
    """The executable to run for ``command``, or ``None`` if there is none.

    Args:
        command: a name (looked up beside ``python``, then on ``path``) or a path.
        python: the interpreter whose directory is searched first.
        path: the search path; ``None`` for ``$PATH``.
    """
    if os.sep in command:
        return command if os.access(command, os.X_OK) and os.path.isfile(command) else None
    beside = os.path.join(os.path.dirname(python), command)
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return beside
    return shutil.which(command, path=path)


def main(argv: Sequence[str]) -> int:
    """Exec ``argv[1:]`` (never returning), or return 127 (missing executable) or 2 (usage) after saying why.

    Raises:
        OSError: the executable exists but could not be run.
    """
    if len(argv) < 2:
        print("usage: python -m runtime.agent.execution.daemon NAME COMMAND [ARGS...]", file=sys.stderr)
        return 2
    name, command = argv[0], argv[1]
    executable = resolve(command)
    if executable is None:
        print(f"trainplane: cannot start the {name}: no executable {command!r} beside {sys.executable} or on "
              f"PATH; install it in the image", file=sys.stderr, flush=True)
        return EXIT_NOT_FOUND
    sys.stdout.flush()
    delivery.ignore()  # the daemon is not Python: a membership change must not kill it (survives exec)
    os.execv(executable, [command, *argv[2:]])  # noqa: S606 - the daemon command the agent planned


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
