"""Local mode: ``python -m runtime launch`` runs one agent process per node on loopback addresses.

Batch mode (default) runs SCRIPT on every rank; the launcher's exit code is the job's. Service mode
(``--mode service``) starts the long-lived processes, writes the coordinator's URL and token to
``<log-dir>/connection.json`` (mode 0600) for ``runtime.client.JobClient.from_file``, and serves
calls until interrupted. Flag names follow torchrun where they overlap, in both of its spellings
(``--nnodes``, ``--nproc-per-node``/``--nproc_per_node``, ``--max-restarts``/``--max_restarts``,
``--master-port``/``--master_port``, ``--log-dir``/``--log_dir``); errors name the flag as typed.
Agents are started by ``runtime.local``. Standard library only.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any, NoReturn, Optional, Sequence

from runtime import local
from runtime.agent import contract
from runtime.agent.errors import RendezvousError
from runtime.agent.settings import MODES
from runtime.agent.world import DISTRIBUTIONS, SINGLE_CONTROLLER, reserved_ports

SERVICE_READY_TIMEOUT_MARGIN = 30.0
"""Seconds beyond the quorum timeout a service job may take to report ready."""


_TORCHRUN_ONLY = {
    "--standalone": "every node runs on this machine already",
    "--rdzv-backend": "the agents run their own rendezvous",
    "--rdzv-endpoint": "node 0's agent is the rendezvous",
    "--rdzv-id": "use --job-name",
    "--rdzv-conf": "the agents run their own rendezvous",
    "--node-rank": "the launcher starts every node itself",
    "--master-addr": "node 0's address is the master",
}
TORCHRUN_ONLY = {**_TORCHRUN_ONLY, **{"--" + f[2:].replace("-", "_"): why for f, why in _TORCHRUN_ONLY.items()}}
"""torchrun flags this launcher does not take, in both of torchrun's spellings, with why it needs
none (for the error's hint)."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``prog: error: ...``) and exit code 2, and no abbreviated
    flags (``--nproc`` would be ambiguous between two spellings of one flag). An error about a flag
    with several spellings names the one typed; an unknown torchrun flag gets a hint."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, allow_abbrev=False, **kwargs)
        self._flags: set[str] = set()

    def parse_known_args(self, args: Optional[Sequence[str]] = None, namespace: Optional[argparse.Namespace] = None,
                         ) -> tuple[argparse.Namespace, list[str]]:
        self._flags = self._flags_before_script(list(sys.argv[1:] if args is None else args))
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        message = re.sub(r"^argument ((?:-[\w-]+/)+-[\w-]+): ", lambda m: f"argument {self._as_typed(m[1])}: ", message)
        unknown = {word.split("=", 1)[0] for word in message.split()} if message.startswith("unrecognized") else set()
        hints = [f"torchrun's {f} is not needed: {why}" for f, why in TORCHRUN_ONLY.items() if f in unknown]
        self.exit(contract.EXIT_USAGE, f"{self.prog}: error: {'; '.join([message, *hints])} (see --help)\n")

    def _flags_before_script(self, args: list[str]) -> set[str]:
        """The flags typed for this launcher: up to SCRIPT (the first argument that is neither a flag
        nor a flag's value), as ``--flag`` without ``=value``; what follows SCRIPT is the script's."""
        flags: set[str] = set()
        remaining = iter(args)
        for arg in remaining:
            if arg == "--" or not arg.startswith("-"):
                break
            name, has_value, _ = arg.partition("=")
            flags.add(name)
            action = self._option_string_actions.get(name)
            if action is not None and action.nargs is None and not has_value:
                next(remaining, None)  # the flag's value
        return flags

    def _as_typed(self, spellings: str) -> str:
        """The spelling of ``--a/--b/--c`` that the command line used, else the first."""
        flags = spellings.split("/")
        return next((f for f in flags if f in self._flags), flags[0])


class _Spelled(argparse.Action):
    """Store the value and remember the spelling typed (``ns.spelled[dest]``), for error messages."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: Optional[str] = None) -> None:
        setattr(namespace, self.dest, values)
        namespace.spelled = {**namespace.spelled, self.dest: option_string or self.option_strings[0]}


class _Nodes(_Spelled):
    """``--workers``/``--nnodes``: store N as ``workers`` and an elastic MIN (``MIN:MAX``) as ``nnodes_min``."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: Optional[str] = None) -> None:
        count, namespace.nnodes_min = values  # type: ignore[misc]  # node_count's pair
        super().__call__(parser, namespace, count, option_string)


def node_count(text: str) -> tuple[int, Optional[int]]:
    """``--nnodes`` as torchrun takes it: ``N``, or ``MIN:MAX`` for an elastic job.

    Returns:
        ``(N, None)``, or ``(MAX, MIN)``: the local launcher starts MAX nodes and keeps going while MIN
        remain.

    Raises:
        argparse.ArgumentTypeError: neither form.
    """
    low, colon, high = text.partition(":")
    try:
        return (int(high), int(low)) if colon else (int(text), None)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or MIN:MAX nodes, got {text!r}") from None


def flag(ns: argparse.Namespace, dest: str, default: str) -> str:
    """The flag for ``dest`` as the user typed it (``--nnodes``), else ``default`` (``--workers``)."""
    return str(ns.spelled.get(dest, default))


def build_parser() -> argparse.ArgumentParser:
    """The ``launch`` command line."""
    p = _Parser(prog="python -m runtime launch", description=__doc__.split("\n\n")[0])
    p.set_defaults(spelled={}, nnodes_min=None)
    p.add_argument("--workers", "--nnodes", dest="workers", type=node_count, default=1, action=_Nodes,
                   metavar="N|MIN:MAX",
                   help="nodes (agents); default 1. MIN:MAX, as torchrun takes it, starts MAX nodes and keeps "
                        "going while MIN remain (the same as --min-workers MIN --max-workers MAX)")
    p.add_argument("--num-proc", "--nproc-per-node", "--nproc_per_node", dest="num_proc", type=int, default=1,
                   action=_Spelled, help="processes per node; default 1")
    p.add_argument("--mode", choices=MODES, default="batch",
                   help="batch runs SCRIPT on every rank (default); service keeps processes up for calls")
    p.add_argument("--distribution", choices=DISTRIBUTIONS, default="spmd",
                   help="which framework's variables to set; spmd sets all (default). ray and monarch run "
                        "SCRIPT once, on node 0, as the driver of a Ray cluster or Monarch host mesh spanning "
                        "every node (--num-proc 1)")
    p.add_argument("--daemon-arg", dest="daemon_args", action="append", default=[], metavar="ARG",
                   help="ray: append ARG to every node's `ray start` (repeatable; write --daemon-arg=--num-cpus=2); "
                        "default none: each node gets its share of this machine's CPUs and object store memory")
    p.add_argument("--quorum-workers", type=int, default=None, help="nodes needed to start; default all")
    p.add_argument("--quorum-timeout", type=float, default=60.0, help="seconds to wait for quorum; default 60")
    p.add_argument("--max-restarts", "--max_restarts", type=int, default=0, action=_Spelled,
                   help="restarts of the whole job after a failure; default 0")
    p.add_argument("--min-workers", type=int, default=None,
                   help="elastic: continue while at least this many nodes remain (losing a node shrinks the "
                        "world); default: not elastic")
    p.add_argument("--max-workers", type=int, default=None,
                   help="elastic: admit late nodes up to this many; default: not elastic")
    p.add_argument("--no-monitor-members", dest="monitor_members", action="store_false",
                   help="do not raise WorkerMembershipChanged in user processes (runtime.membership.poll works)")
    p.add_argument("--heartbeat-ttl", type=float, default=3.0,
                   help="seconds without a heartbeat before a node is dead; default 3")
    p.add_argument("--master-port", "--master_port", type=int, default=contract.DEFAULT_MASTER_PORT, action=_Spelled,
                   help=f"rendezvous port on node 0; default {contract.DEFAULT_MASTER_PORT}, 0 picks a free one")
    p.add_argument("--log-dir", "--log_dir", default=None,
                   help="directory for per-rank logs; default a temporary directory")
    p.add_argument("--job-name", default=None, help="job id (TORCHELASTIC_RUN_ID); default local-<random>")
    p.add_argument("--grace-period", type=float, default=5.0, help="seconds between SIGTERM and SIGKILL; default 5")
    p.add_argument("--pythonpath", action="append", default=[], metavar="DIR",
                   help="put DIR on the processes' PYTHONPATH (repeatable); in service mode, where the "
                        "functions called with the client are imported from")
    p.add_argument("--tree-threshold", type=int, default=contract.DEFAULT_TREE_THRESHOLD,
                   help=f"service mode: calls to this many nodes or more travel a tree; "
                        f"default {contract.DEFAULT_TREE_THRESHOLD}")
    p.add_argument("--tree-fanout", type=int, default=contract.DEFAULT_TREE_FANOUT,
                   help=f"service mode: children per node in a tree; default {contract.DEFAULT_TREE_FANOUT}")
    p.add_argument("--allow-pickle", action="store_true",
                   help="service mode: accept pickled arguments from token holders (default: JSON only)")
    p.add_argument("-m", "--module", action="store_true", help="run SCRIPT as a module, like python -m")
    p.add_argument("--no-python", "--no_python", dest="no_python", action="store_true",
                   help="run SCRIPT as a command (found on PATH) instead of under the interpreter, as torchrun's "
                        "--no-python does, e.g. --no-python sh -c 'echo $RANK'")
    p.add_argument("script", metavar="SCRIPT", nargs="?",
                   help="batch mode: the training script (a module with -m, a command with --no-python)")
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="arguments for the script")
    return p


def validate(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> None:
    """Check flag values; calls ``parser.error`` (exit 2) naming the flag and the fix.

    Also resolves ``--nnodes MIN:MAX`` into ``workers``, ``min_workers`` and ``max_workers``.
    """
    batch = ns.mode == "batch"
    workers = flag(ns, "workers", "--workers")
    if ns.nnodes_min is not None:
        if not 1 <= ns.nnodes_min <= ns.workers:
            parser.error(f"{workers}: MIN:MAX needs 1 <= MIN <= MAX (got {ns.nnodes_min}:{ns.workers})")
        if ns.min_workers is not None or ns.max_workers is not None:
            parser.error(f"{workers}: MIN:MAX and --min-workers/--max-workers both set the elastic bounds; "
                         f"use one of them")
        ns.min_workers, ns.max_workers = ns.nnodes_min, ns.workers
    master_port = flag(ns, "master_port", "--master-port")
    reserved = reserved_ports(ns.workers * ns.num_proc)
    checks = (
        (ns.workers >= 1, f"{workers}: must be 1 or more (got {ns.workers})"),
        (ns.num_proc >= 1, f"{flag(ns, 'num_proc', '--num-proc')}: must be 1 or more (got {ns.num_proc})"),
        (ns.quorum_workers is None or 1 <= ns.quorum_workers <= ns.workers,
         f"--quorum-workers: must be from 1 to {workers} ({ns.workers}) (got {ns.quorum_workers})"),
        (ns.quorum_timeout > 0, f"--quorum-timeout: must be a positive number of seconds (got {ns.quorum_timeout})"),
        (ns.max_restarts >= 0, f"{flag(ns, 'max_restarts', '--max-restarts')}: must be 0 or more "
                               f"(got {ns.max_restarts})"),
        (0 <= ns.master_port <= 65535, f"{master_port}: must be from 1 to 65535, or 0 for any (got {ns.master_port})"),
        (ns.master_port + reserved <= 65536 or not 0 < ns.master_port <= 65535,
         f"{master_port}: the job uses {reserved} ports from it (rendezvous, JAX, TensorFlow), past 65535 "
         f"(got {ns.master_port}); use at most {65536 - reserved}, or 0 for any"),
        (ns.min_workers is None or 1 <= ns.min_workers <= ns.workers,
         f"--min-workers: must be from 1 to {workers} ({ns.workers}) (got {ns.min_workers})"),
        (ns.max_workers is None or ns.max_workers >= ns.workers,
         f"--max-workers: must be at least {workers} ({ns.workers}) (got {ns.max_workers})"),
        (ns.heartbeat_ttl >= 1.0, f"--heartbeat-ttl: must be at least 1 second (got {ns.heartbeat_ttl})"),
        (ns.grace_period >= 0, f"--grace-period: must be 0 or more seconds (got {ns.grace_period})"),
        (ns.tree_threshold >= 1, f"--tree-threshold: must be 1 or more (got {ns.tree_threshold})"),
        (ns.tree_fanout >= 2, f"--tree-fanout: must be 2 or more (got {ns.tree_fanout})"),
        *((Path(d).is_dir(), f"--pythonpath: no such directory {d!r}") for d in ns.pythonpath),
        (not batch or ns.script is not None, "SCRIPT: batch mode needs a script (or -m module)"),
        (batch or ns.script is None, f"SCRIPT: service mode runs no script (got {ns.script!r}); call functions "
                                     f"with runtime.client.JobClient"),
        (not (ns.module and ns.no_python), "--no-python: runs a command, not a module; drop -m or --no-python"),
        (batch or not ns.no_python, "--no-python: service mode runs no command; drop --no-python"),
        (not batch or ns.module or ns.no_python or (ns.script is not None and Path(ns.script).is_file()),
         f"SCRIPT: no such file {ns.script!r} (use -m for a module, --no-python for a command)"),
        *_single_controller_checks(ns),
    )
    for ok, message in checks:
        if not ok:
            parser.error(message)


def _single_controller_checks(ns: argparse.Namespace) -> tuple[tuple[bool, str], ...]:
    """(ok, message) pairs for the flags that ray and monarch jobs take or restrict."""
    dist = ns.distribution
    daemon_args = (not ns.daemon_args or dist == "ray",
                   f"--daemon-arg: applies to --distribution ray (got --distribution {dist})")
    if dist not in SINGLE_CONTROLLER:
        return (daemon_args,)
    num_proc = flag(ns, "num_proc", "--num-proc")
    return (
        (ns.num_proc == 1, f"{num_proc}: a {dist} job runs one driver process, on node 0, and {dist}'s own "
                           f"workers on every node; use {num_proc} 1 (got {ns.num_proc})"),
        (ns.min_workers is None and ns.max_workers is None,
         f"--min-workers/--max-workers: a {dist} job cannot be elastic (its head is node 0); drop them"),
        daemon_args,
    )


def spec_from_args(ns: argparse.Namespace) -> local.LocalJobSpec:
    """The local job the command line describes."""
    entrypoint = (["-m", ns.script] if ns.module else [ns.script]) + list(ns.args) if ns.script else []
    return local.LocalJobSpec(
        workers=ns.workers, num_proc=ns.num_proc, mode=ns.mode, entrypoint=tuple(entrypoint),
        distribution=ns.distribution, quorum_workers=ns.quorum_workers, quorum_timeout=ns.quorum_timeout,
        max_restarts=ns.max_restarts, master_port=ns.master_port, log_dir=ns.log_dir, job_name=ns.job_name,
        grace_period=ns.grace_period, min_workers=ns.min_workers, max_workers=ns.max_workers,
        monitor_members=ns.monitor_members, heartbeat_ttl=ns.heartbeat_ttl, no_python=ns.no_python,
        pythonpath=tuple(str(Path(d).resolve()) for d in ns.pythonpath), daemon_args=tuple(ns.daemon_args),
        env={contract.TREE_THRESHOLD: str(ns.tree_threshold), contract.TREE_FANOUT: str(ns.tree_fanout),
             contract.ALLOW_PICKLE: "true" if ns.allow_pickle else "false"},
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run a job locally; return its exit code (the failing rank's code, or 0)."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    validate(parser, ns)
    spec = spec_from_args(ns)
    try:
        job = local.start(spec)
    except RuntimeError as exc:
        parser.error(str(exc))
    print(f"[trainplane] job {job.job}: {ns.workers} node(s) x {ns.num_proc} process(es) on "
          f"{', '.join(sorted(set(job.plan.addresses)))}; logs in {job.log_dir}", file=sys.stderr, flush=True)
    if ns.mode == "service":
        try:
            job.wait_ready(ns.quorum_timeout + SERVICE_READY_TIMEOUT_MARGIN)
        except RendezvousError as exc:
            print(f"[trainplane] {exc}", file=sys.stderr, flush=True)
            job.stop()
            return contract.EXIT_RENDEZVOUS
        print(f"[trainplane] service ready at {job.url}; connection (URL and token) in {job.write_connection_file()};"
              f" Ctrl-C stops it", file=sys.stderr, flush=True)
    return job.supervise()
