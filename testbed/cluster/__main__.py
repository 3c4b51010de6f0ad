"""``python -m testbed.cluster build|up|down``: build the binaries, start the test cluster, stop it.

``up`` prints the admin kubeconfig's path (``export KUBECONFIG=$(python -m testbed.cluster up)``); the
cluster runs on until ``down``. ``--state DIR`` picks another state directory than the default
``<cache>/run/default``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from testbed.cluster import crds, lifecycle
from testbed.cluster.build import BuildError, build_all
from testbed.cluster.waiting import Abort, Timeout


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; returns the exit code (1 with the error on stderr when it fails)."""
    parser = argparse.ArgumentParser(prog="python -m testbed.cluster", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="build (or find cached) every binary the cluster tests need, and generate the CRDs")
    for name, text in (("up", "start the cluster (building first if needed); print the kubeconfig path"),
                       ("down", "stop the cluster and remove its state")):
        command = sub.add_parser(name, help=text)
        command.add_argument("--state", type=Path, default=None, help="state directory (default: under the cache)")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            build_all()
            print(f"CRDs: {crds.generate()}")
        elif args.command == "up":
            build_all(report=lambda line: print(line, file=sys.stderr))
            print(lifecycle.up(args.state).kubeconfig)
        elif not lifecycle.down(args.state):
            print("no test cluster was running", file=sys.stderr)
    except (BuildError, Abort, Timeout) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
