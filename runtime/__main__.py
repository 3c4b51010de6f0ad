"""``python -m runtime <command>``: ``launch`` runs a job on this machine (local mode)."""

from __future__ import annotations

import sys

from runtime.local import launch

USAGE = "usage: python -m runtime launch [options] SCRIPT [ARGS...]   (python -m runtime launch --help)"


def main(argv: list[str]) -> int:
    """Dispatch to a subcommand: 0 with the usage line for ``-h``/``--help``, 2 with it for anything
    but ``launch``."""
    if argv[:1] in (["-h"], ["--help"]):
        print(f"{USAGE}\n\ncommands:\n  launch    run a job on this machine: one agent process per node, on loopback "
              f"addresses")
        return 0
    if not argv or argv[0] != "launch":
        print(USAGE, file=sys.stderr)
        return 2
    return launch.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
