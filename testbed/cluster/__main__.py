"""``python -m testbed.cluster build|up|down``: build the binaries, start the test cluster, stop it.

``build --with NAME`` (repeatable) also builds an optional part, which the default build leaves out:
``pods``, the real node (``realnode.py``: Debian's containerd, runc and CNI plugins installed with apt-get when
missing, the kubelet and CoreDNS; CI builds it, for the cluster tier's real-node tests), ``trainer`` (Kubeflow
Trainer v2 and JobSet), ``training-operator``, ``scheduler-plugins`` (``build.PARTS``).

``up`` prints the admin kubeconfig's path (``export KUBECONFIG=$(python -m testbed.cluster up)``); the
cluster runs on until ``down``. ``env`` prints the shell ``export`` lines that point the built ``pulumi``
at the running cluster (``eval "$(python -m testbed.cluster env)"``): KUBECONFIG, PATH, a test-only
PULUMI_HOME, a file backend under the state directory, a passphrase, no plugin downloads. ``--state DIR``
picks another state directory than the default ``<cache>/run/default``. ``project STACK DIR`` copies the repository's
own program into DIR with a ``STACK`` stack pointed at the running cluster, its add-ons left out
(``project.cluster_stack``), for ``pulumi -C DIR up``; ``program STACK DIR`` writes a stack's jobs as a Pulumi YAML
program instead.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from testbed.cluster import crds, lifecycle, podsbuild
from testbed.cluster.build import PARTS, TOOLS, BuildError, GoTool, build_all
from testbed.cluster.engine import Engine
from testbed.cluster.trainer import TRAINER_TOOL
from testbed.cluster.waiting import Abort, Timeout

OPTIONAL: dict[str, tuple[GoTool, ...]] = {"trainer": (TRAINER_TOOL,), **PARTS}
"""The parts ``build`` leaves out unless named with ``--with``: ``pods`` for the cluster tier's real-node tests
(the ``real_node`` fixture builds it too when it is missing), the others for a ``tests/cluster/live_*.py`` each."""


def print_env(state: Path | None) -> None:
    """Print ``export NAME=value`` for every variable ``Engine.env`` sets beyond the current environment.

    Raises:
        Abort: no cluster runs in ``state``.
    """
    cluster = lifecycle.running(state)
    engine = Engine(cluster.state, cluster.state / "pulumi-state", cluster.kubeconfig)
    current = dict(os.environ)
    for name, value in sorted(engine.env().items()):
        if current.get(name) != value:
            print(f"export {name}={shlex.quote(value)}")


def program_command(stack: str, directory: Path, skip_custom: bool) -> int:
    """``program STACK DIR``; imported here: it needs the Pulumi SDK, which ``build`` (run before the venv
    exists, standard library only) must not."""
    from components.errors import StackConfigError
    from testbed.cluster.stackjobs import StackJobsError, stack_jobs_program

    try:
        print(stack_jobs_program(stack, directory, skip_custom))
    except (StackJobsError, StackConfigError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


def project_command(stack: str, directory: Path, state: Path | None) -> int:
    """``project STACK DIR``: the program copied into ``directory`` with ``stacks/Pulumi.<stack>.yaml`` for the
    running cluster; prints the directory, and each setting left out on stderr. Imported here: it needs PyYAML,
    which ``build`` (run before the venv exists) must not.

    Raises:
        Abort: no cluster runs in ``state``.
    """
    from testbed.cluster.project import cluster_stack, copy_project

    try:
        stack_config = cluster_stack(stack, lifecycle.running(state).kubeconfig)
    except FileNotFoundError:
        print(f"error: no stack {stack!r}: stacks/Pulumi.{stack}.yaml does not exist", file=sys.stderr)
        return 1
    copy_project(directory, stack, stack_config.config)
    for setting in stack_config.left_out:
        print(f"left out (needs an add-on this cluster does not run): {setting}", file=sys.stderr)
    print(directory)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; returns the exit code (1 with the error on stderr when it fails)."""
    parser = argparse.ArgumentParser(prog="python -m testbed.cluster", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build (or find cached) every binary the cluster tests need, and generate the "
                           "CRDs")
    build.add_argument("--with", dest="extra", action="append", choices=sorted(OPTIONAL), default=[],
                       help="also build an optional part (pods: the real node of the cluster tier's real-node tests, "
                            "Debian packages, kubelet and CoreDNS; trainer: the Kubeflow Trainer v2 and JobSet "
                            "managers; training-operator; scheduler-plugins: each for a tests/cluster/live_*.py); "
                            "repeatable")
    for name, text in (("up", "start the cluster (building first if needed); print the kubeconfig path"),
                       ("down", "stop the cluster and remove its state"),
                       ("env", "print export lines pointing the built pulumi at the running cluster")):
        command = sub.add_parser(name, help=text)
        command.add_argument("--state", type=Path, default=None, help="state directory (default: under the cache)")
    program = sub.add_parser("program", help="write a stack's jobs as a Pulumi YAML program for the test cluster")
    program.add_argument("stack", help="the stack (stacks/Pulumi.<stack>.yaml)")
    program.add_argument("directory", type=Path, help="where to write Pulumi.yaml")
    program.add_argument("--skip-custom-resources", action="store_true",
                         help="leave out custom resources (Pulumi YAML cannot register them) instead of refusing")
    project = sub.add_parser("project", help="copy the program with a stack pointed at the running cluster, its "
                             "add-ons left out")
    project.add_argument("stack", help="the stack (stacks/Pulumi.<stack>.yaml)")
    project.add_argument("directory", type=Path, help="where to copy the program")
    project.add_argument("--state", type=Path, default=None, help="state directory (default: under the cache)")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            build_all((*TOOLS, *(tool for name in args.extra if name != "pods" for tool in OPTIONAL[name])))
            print(f"CRDs: {crds.generate()}")
            if "pods" in args.extra:
                podsbuild.build()
        elif args.command == "up":
            build_all(report=lambda line: print(line, file=sys.stderr))
            print(lifecycle.up(args.state).kubeconfig)
        elif args.command == "project":
            return project_command(args.stack, args.directory, args.state)
        elif args.command == "program":
            return program_command(args.stack, args.directory, args.skip_custom_resources)
        elif args.command == "env":
            print_env(args.state)
        elif not lifecycle.down(args.state):
            print("no test cluster was running", file=sys.stderr)
    except (BuildError, Abort, Timeout) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
