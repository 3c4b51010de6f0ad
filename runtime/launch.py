"""Local mode: ``python -m runtime launch`` runs one agent process per node on loopback addresses.

Batch mode (default) runs SCRIPT on every rank; the launcher's exit code is the job's. Service mode
(``--mode service``) starts the long-lived processes, writes the coordinator's URL and token to
``<log-dir>/connection.json`` (mode 0600) for ``runtime.client.JobClient.from_file``, and serves
calls until interrupted. Every option of torchrun (torch 2.13.0 ``torch.distributed.run``) is
accepted in both of its spellings and value forms, so a torchrun command line runs with
``python -m runtime launch`` in its place: the ones that mean something here do what torchrun does;
the others (:data:`IGNORED`: a rendezvous endpoint, a node rank) are named in one notice line.
Errors name the flag as typed. Agents are started by ``runtime.local``. Standard library only
(torch is imported only to count devices for ``--nproc-per-node gpu|xpu|auto``).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any, NoReturn, Optional, Sequence, Union

from runtime import local
from runtime.agent import contract, streams, torchrun
from runtime.agent.errors import RendezvousError
from runtime.agent.settings import MODES
from runtime.agent.world import DEFAULT_ROLE, DISTRIBUTIONS, SINGLE_CONTROLLER, reserved_ports

SERVICE_READY_TIMEOUT_MARGIN = 30.0
"""Seconds beyond the quorum timeout a service job may take to report ready."""
DEFAULT_GRACE = 5.0
"""Seconds between the stop signal and SIGKILL when neither the flag nor the variable says."""
SHUTDOWN_TIMEOUT_ENV = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"
"""torchrun's default for ``--shutdown-timeout`` (torch 2.13.0 ``torch/distributed/launcher/api.py``)."""


IGNORED = {
    "rdzv_backend": "the agents run their own rendezvous",
    "rdzv_endpoint": "node 0's agent is the rendezvous",
    "rdzv_conf": "the agents run their own rendezvous",
    "standalone": "every node runs on this machine already",
    "node_rank": "the launcher starts every node itself",
    "master_addr": "node 0's address is the master",
    "local_addr": "each node has its own loopback address",
    "monitor_interval": "each agent sees its processes exit at once",
    "start_method": "a script runs as its own process either way, as under torchrun",
    "event_log_handler": "torchrun's event log is torchrun's",
    "logs_specs": "output goes where --log-dir, --redirects and --tee say",
    "numa_binding": "it binds processes to CPUs near their GPU",
}
"""torchrun options with no meaning for this launcher, by dest, with why: accepted in torchrun's
spellings and value forms, then named in one notice line, so a torchrun command line runs
unchanged and what runs is never silently different."""
NUMA_MODES = ("node", "socket", "exclusive", "core-complex")
"""torchrun's ``--numa-binding`` choices (torch 2.13.0 ``torch.numa.binding.AffinityMode``)."""
START_METHODS = ("spawn", "fork", "forkserver")
"""torchrun's ``--start-method`` choices."""


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
        self.exit(contract.EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")

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


class _Flag(argparse.Action):
    """A flag (``nargs=0``) that remembers it was typed, for the ignored-options notice."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: Optional[str] = None) -> None:
        setattr(namespace, self.dest, True)
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


def nproc(text: str) -> Union[int, str]:
    """``--nproc-per-node`` as torchrun takes it: a whole number, or ``auto``, ``cpu``, ``gpu``, ``xpu``
    (resolved by :func:`resolve_nproc` once every flag is known).

    Raises:
        argparse.ArgumentTypeError: anything else.
    """
    if text in ("auto", "cpu", "gpu", "xpu"):
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of processes, or auto, cpu, gpu or xpu, got {text!r}"
                                         ) from None


def cpu_count() -> int:
    """The CPUs this process may run on, as torch counts them (``torch._utils.cpu_count``)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def resolve_nproc(value: Union[int, str]) -> int:
    """torchrun's ``determine_local_world_size`` (torch 2.13.0 ``torch/distributed/run.py``): ``cpu`` is
    :func:`cpu_count`; ``gpu`` and ``xpu`` the devices torch sees (imported only for them); ``auto``
    the accelerators torch sees, else :func:`cpu_count` (also when torch is not installed).

    Raises:
        ValueError: ``gpu``/``xpu`` without such a device (or without torch), in torchrun's words.
    """
    if isinstance(value, int):
        return value
    if value == "cpu":
        return cpu_count()
    try:
        import torch
    except ImportError:
        if value == "auto":
            return cpu_count()
        raise ValueError(f"{value} needs torch to count its devices, and torch is not installed") from None
    if value == "auto":
        accelerator = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
        return torch.accelerator.device_count() if accelerator is not None else cpu_count()
    device = torch.cuda if value == "gpu" else torch.xpu
    if not device.is_available():
        raise ValueError(f"{'Cuda' if value == 'gpu' else 'Xpu'} is not available.")
    return int(device.device_count())


def ignored_notice(ns: argparse.Namespace) -> str:
    """The one line naming the torchrun options typed that have no meaning here (``""`` for none)."""
    typed = [(dest, ns.spelled[dest]) for dest in IGNORED if dest in ns.spelled]
    if not typed:
        return ""
    shown = [flag_ if dest == "standalone" else f"{flag_}={getattr(ns, dest)}" for dest, flag_ in typed]
    return (f"[trainplane] ignoring torchrun options with no meaning here: {', '.join(shown)} "
            f"({'; '.join(IGNORED[dest] for dest, _ in typed)})")


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
    p.add_argument("--num-proc", "--nproc-per-node", "--nproc_per_node", dest="num_proc", type=nproc, default=1,
                   action=_Spelled, metavar="N|auto|cpu|gpu|xpu",
                   help="processes per node, or as torchrun counts them: cpu (this process's CPUs), gpu or xpu "
                        "(the devices torch sees; an error if none), auto (the accelerators torch sees, else the "
                        "CPUs); default 1")
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
                   help="base directory for logs, as torchrun takes it: each job writes to its own "
                        "<job id>_<random> directory in it; default a temporary directory")
    p.add_argument("--job-name", "--rdzv-id", "--rdzv_id", dest="job_name", default=None, action=_Spelled,
                   help="job id (TORCHELASTIC_RUN_ID); default local-<random>")
    p.add_argument("--grace-period", "--shutdown-timeout", "--shutdown_timeout", dest="grace_period", type=float,
                   default=None, action=_Spelled,
                   help="seconds between the stop signal and SIGKILL; default TORCH_ELASTIC_SHUTDOWN_TIMEOUT "
                        f"if set (as torchrun reads it), else {DEFAULT_GRACE:g}")
    p.add_argument("--role", default=DEFAULT_ROLE, action=_Spelled,
                   help=f"the workers' role (ROLE_NAME); default {DEFAULT_ROLE}")
    p.add_argument("--signals-to-handle", "--signals_to_handle", dest="signals_to_handle",
                   default=torchrun.DEFAULT_SIGNALS, action=_Spelled,
                   help="signals the launcher and every agent pass on to every rank, comma-separated; default "
                        f"torchrun's {torchrun.DEFAULT_SIGNALS}, which stop the job; add SIGUSR1,SIGUSR2 to pass "
                        "on a scheduler's preemption notice, after which the job goes on")
    p.add_argument("-r", "--redirects", default="0", action=_Spelled,
                   help="streams of ranks written to files only (torchrun's form: 0 none, 1 stdout, 2 stderr, "
                        "3 both, or LOCAL_RANK:N,...); default 0")
    p.add_argument("-t", "--tee", default="0", action=_Spelled,
                   help="streams written to files and the console (same form); default 0")
    p.add_argument("--local-ranks-filter", "--local_ranks_filter", dest="local_ranks_filter", default="",
                   action=_Spelled, help="only these local ranks' output reaches the console, e.g. 0 or 0,1 "
                                         "(files are still written); default all")
    p.add_argument("--duplicate-stdout-filters", "--duplicate_stdout_filters", dest="stdout_filters", default="",
                   action=_Spelled, help="stdout lines holding one of these comma-separated strings are also "
                                         "written to filtered_stdout.log (,, for a comma); default none")
    p.add_argument("--duplicate-stderr-filters", "--duplicate_stderr_filters", dest="stderr_filters", default="",
                   action=_Spelled, help="the same for stderr, filtered_stderr.log")
    p.add_argument("--virtual-local-rank", "--virtual_local_rank", dest="virtual_local_rank", action="store_true",
                   help="every process gets LOCAL_RANK 0 and CUDA_VISIBLE_DEVICES naming its one GPU")
    p.add_argument("--run-path", "--run_path", dest="run_path", action="store_true",
                   help="run SCRIPT (a path) under the interpreter, as torchrun's --run-path does; it wins over "
                        "--no-python")
    ignored = p.add_argument_group("torchrun options with no meaning here", "accepted as torchrun takes them, "
                                   "named in one notice line, and ignored")
    for dest, flags, kind in (
        ("rdzv_backend", ("--rdzv-backend", "--rdzv_backend"), str),
        ("rdzv_endpoint", ("--rdzv-endpoint", "--rdzv_endpoint"), str),
        ("rdzv_conf", ("--rdzv-conf", "--rdzv_conf"), str),
        ("node_rank", ("--node-rank", "--node_rank"), int),
        ("master_addr", ("--master-addr", "--master_addr"), str),
        ("local_addr", ("--local-addr", "--local_addr"), str),
        ("monitor_interval", ("--monitor-interval", "--monitor_interval"), float),
        ("start_method", ("--start-method", "--start_method"), START_METHODS),
        ("event_log_handler", ("--event-log-handler", "--event_log_handler"), str),
        ("logs_specs", ("--logs-specs", "--logs_specs"), str),
        ("numa_binding", ("--numa-binding", "--numa_binding"), NUMA_MODES),
    ):
        choices = kind if isinstance(kind, tuple) else None
        ignored.add_argument(*flags, dest=dest, default=None, action=_Spelled, type=None if choices else kind,
                             choices=choices, help=IGNORED[dest])
    ignored.add_argument("--standalone", dest="standalone", action=_Flag, nargs=0, default=False,
                         help=IGNORED["standalone"])
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
    num_proc = flag(ns, "num_proc", "--num-proc")
    try:
        ns.num_proc = resolve_nproc(ns.num_proc)
    except ValueError as exc:
        parser.error(f"{num_proc}: {exc}")
    if ns.grace_period is None:
        shutdown = os.environ.get(SHUTDOWN_TIMEOUT_ENV, "")
        try:
            ns.grace_period = float(shutdown) if shutdown else DEFAULT_GRACE
        except ValueError:
            parser.error(f"{SHUTDOWN_TIMEOUT_ENV}={shutdown!r}: not a number of seconds")
    if ns.run_path:
        ns.no_python = ns.module = False  # torchrun: --run-path runs SCRIPT as a path, whatever else is set
    for dest, parse in (("redirects", streams.parse_std), ("tee", streams.parse_std),
                        ("local_ranks_filter", streams.parse_ranks), ("signals_to_handle", torchrun.parse_signals)):
        try:
            parse(getattr(ns, dest))
        except ValueError as exc:
            parser.error(f"{flag(ns, dest, '--' + dest.replace('_', '-'))}: {exc}")
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
        (ns.num_proc >= 1, f"{num_proc}: must be 1 or more (got {ns.num_proc})"),
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
        (not ns.virtual_local_rank or _gpus_for(ns.num_proc),
         f"--virtual-local-rank: {contract.CUDA_VISIBLE_DEVICES}={os.environ.get(contract.CUDA_VISIBLE_DEVICES)} "
         f"names fewer GPUs than the {ns.num_proc} processes per node; name one per process or unset it"),
        (ns.heartbeat_ttl >= 1.0, f"--heartbeat-ttl: must be at least 1 second (got {ns.heartbeat_ttl})"),
        (ns.grace_period >= 0, f"{flag(ns, 'grace_period', '--grace-period')}: must be 0 or more seconds "
                               f"(got {ns.grace_period})"),
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


def _gpus_for(num_proc: int) -> bool:
    """Whether ``CUDA_VISIBLE_DEVICES`` (if set) names a GPU for each of ``num_proc`` processes."""
    visible = os.environ.get(contract.CUDA_VISIBLE_DEVICES)
    return visible is None or len(visible.split(",")) >= num_proc


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


def job_log_dir(base: Optional[str], job: str) -> Optional[str]:
    """``--log-dir`` as torchrun takes it: a base directory, in which each run gets a directory of its
    own, ``<job id>_<random>`` (so reusing the base never mixes two runs); ``None`` without one."""
    if base is None:
        return None
    os.makedirs(base, exist_ok=True)
    return tempfile.mkdtemp(prefix=f"{job}_", dir=base)


def output_env(ns: argparse.Namespace) -> dict[str, str]:
    """The agents' settings for where the ranks' output goes and how their environment is shaped."""
    env = {name: getattr(ns, dest) for name, dest in (
        (contract.REDIRECTS, "redirects"), (contract.TEE, "tee"), (contract.LOCAL_RANKS_FILTER, "local_ranks_filter"),
        (contract.STDOUT_FILTERS, "stdout_filters"), (contract.STDERR_FILTERS, "stderr_filters"),
    ) if getattr(ns, dest) not in ("", "0")}
    if ns.virtual_local_rank:
        env[contract.VIRTUAL_LOCAL_RANK] = "true"
    return env


def spec_from_args(ns: argparse.Namespace) -> local.LocalJobSpec:
    """The local job the command line describes."""
    entrypoint = (["-m", ns.script] if ns.module else [ns.script]) + list(ns.args) if ns.script else []
    job = ns.job_name or f"local-{uuid.uuid4().hex[:8]}"
    return local.LocalJobSpec(
        workers=ns.workers, num_proc=ns.num_proc, mode=ns.mode, entrypoint=tuple(entrypoint),
        distribution=ns.distribution, quorum_workers=ns.quorum_workers, quorum_timeout=ns.quorum_timeout,
        max_restarts=ns.max_restarts, master_port=ns.master_port, log_dir=job_log_dir(ns.log_dir, job), job_name=job,
        grace_period=ns.grace_period, min_workers=ns.min_workers, max_workers=ns.max_workers,
        monitor_members=ns.monitor_members, heartbeat_ttl=ns.heartbeat_ttl, no_python=ns.no_python,
        pythonpath=tuple(str(Path(d).resolve()) for d in ns.pythonpath), daemon_args=tuple(ns.daemon_args),
        env={contract.TREE_THRESHOLD: str(ns.tree_threshold), contract.TREE_FANOUT: str(ns.tree_fanout),
             contract.ALLOW_PICKLE: "true" if ns.allow_pickle else "false", **output_env(ns)},
        role=ns.role, signals_to_handle=ns.signals_to_handle, forward_stdin=ns.mode == "batch",
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run a job locally; return its exit code (the failing rank's code, or 0)."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    validate(parser, ns)
    notice = ignored_notice(ns)
    if notice:
        print(notice, file=sys.stderr, flush=True)
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
