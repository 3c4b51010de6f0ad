"""Local mode: ``python -m runtime launch`` runs one agent process per node on loopback addresses.

Batch mode (default) runs SCRIPT on every rank; the launcher's exit code is the job's. Service mode
(``--mode service``) starts the long-lived processes, writes the coordinator's URL and token to
``<log-dir>/connection.json`` (mode 0600) for ``runtime.client.JobClient.from_file``, and serves
calls until interrupted. Every job setting's flags, default, help and check come from the job spec
(``runtime.agent.spec.job``); every option of torchrun (torch 2.13.0 ``torch.distributed.run``) is
accepted in both of its spellings and value forms, so a torchrun command line runs with
``python -m runtime launch`` in its place: the ones that mean something here do what torchrun does;
the others (``torchrun_options.IGNORED``: a rendezvous endpoint, a node rank) are named in one notice
line. Errors name the flag as typed. Agents are started by ``runtime.local.jobs``. Standard library only.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from runtime.agent import contract
from runtime.agent.errors import ParseError, RendezvousError, SpecError
from runtime.agent.spec.job import DISTRIBUTIONS, ELASTIC_BOUNDS, MODES, SETTINGS, default
from runtime.agent.spec.ports import port_block
from runtime.agent.spec.setting import INT, SECONDS, Codec, one_of
from runtime.local import hosts, jobs
from runtime.local.cli_parser import Nodes, Parser, Spelled, SpelledAppend, SpelledFlag
from runtime.local.torchrun_options import (
    IGNORED,
    NUMA_MODES,
    PER_NODE_HELP,
    START_METHODS,
    ignored_notice,
    node_count,
    nproc,
    resolve_nproc,
)

SERVICE_READY_TIMEOUT_MARGIN = 30.0
"""Seconds beyond the quorum timeout a service job may take to report ready."""
SHUTDOWN_TIMEOUT_ENV = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"
"""torchrun's default for ``--shutdown-timeout`` (torch 2.13.0 ``torch/distributed/launcher/api.py``)."""


def _parsed_by(read: Callable[[str], Any]) -> Any:
    """An argparse ``type`` that reads a value with ``read`` (a setting's codec's ``parse``, as the agent
    reads it from its environment, or one of torchrun's forms); text it cannot read (its ``ParseError``) is
    refused as ``problem (got 'text'); fix``."""

    def parse(text: str) -> Any:
        try:
            return read(text)
        except ParseError as exc:
            raise argparse.ArgumentTypeError(f"{exc.problem} (got {text!r}); {exc.fix}") from None

    return parse


def _choice_form(choices: Sequence[str]) -> dict[str, Any]:
    """The argparse form of a flag taking one of ``choices``, shown as ``{a,b}``, anything else refused in the spec's
    words (``one_of``, as the agent refuses its environment): ``must be one of ... (got 'x'); use one of ...``."""
    check = one_of(choices)

    def parse(text: str) -> str:
        refused = check(text)
        if refused is not None:
            raise argparse.ArgumentTypeError(f"{refused[0]} (got {text!r}); {refused[1]}")
        return text

    return {"type": parse, "metavar": "{" + ",".join(choices) + "}"}


FLAG_FORMS: dict[str, dict[str, Any]] = {
    "workers": {"type": _parsed_by(node_count), "action": Nodes, "metavar": "N|MIN:MAX",
                "help": "nodes (agents); MIN:MAX, as torchrun takes it, starts MAX nodes and keeps going while "
                        "MIN remain (the same as --min-workers MIN --max-workers MAX)"},
    "num_proc": {"type": _parsed_by(nproc), "metavar": "N|auto|cpu|gpu|xpu",
                 "help": "processes per node, or as torchrun counts them: cpu (this process's CPUs), gpu or xpu "
                         "(the devices torch sees; an error if none), auto (the accelerators torch sees, else the "
                         "CPUs)"},
    "mode": _choice_form(MODES), "distribution": _choice_form(DISTRIBUTIONS),
    "master_port": {"default": None,
                    "help": "rendezvous port on node 0 (TCP), the base of the ports the job counts up from; unset or "
                            "0, a free block of ports picked and reserved as LocalCompute does, so jobs started at the "
                            "same moment never share one"},
    "grace_period": {"default": None,
                     "help": f"seconds between the stop signal and SIGKILL; unset, {SHUTDOWN_TIMEOUT_ENV} if set (as "
                             f"torchrun reads it), else {default('grace_period'):g}"},
    "log_dir": {"help": "base directory for logs, as torchrun takes it: each job writes to its own "
                        "<job id>_<random> directory in it; unset, <tmp>/trainplane-<uid>/<job id>, private to "
                        "this user, where only the newest 20 job directories are kept (runtime/local/logdirs.py)"},
    "daemon_args": {"action": SpelledAppend, "default": [], "metavar": "ARG",
                    "help": "ray: append ARG to every node's `ray start` (repeatable; write "
                            "--daemon-arg=--num-cpus=2); unset, each node gets its share of this machine's CPUs and "
                            "object store memory"},
    "monitor_members": {"action": SpelledFlag, "const": False,
                        "help": "do not raise WorkerMembershipChanged in user processes on a membership change "
                                "(it is raised unless this is given; runtime.membership.poll and wait work either "
                                "way)"},
    **{name: {"action": SpelledFlag, "const": True} for name in ("no_python", "allow_pickle", "virtual_local_rank")},
}
"""How the launcher's command line takes a job setting's value where the spec's declaration does not say it:
every other flag that takes a value reads it with the setting's codec, as the agent reads the setting from its
environment (a number the agent refuses as ``must be a whole number; write it in digits, e.g. 4``, so does
the flag)."""
LAUNCHER_NAMES = {"entrypoint": "SCRIPT"}
"""What errors call a job setting that has no flag: the part of the command line that gives it."""


def flag(ns: argparse.Namespace, dest: str, fallback: Optional[str] = None) -> str:
    """The flag for setting (or option) ``dest`` as the user typed it (``--nnodes``), else its first
    spelling (``--workers``), else ``fallback``, else what errors call it."""
    typed = ns.spelled.get(dest)
    if typed:
        return str(typed)
    if dest in ("min_workers", "max_workers") and getattr(ns, "nnodes_min", None) is not None:
        return f"{flag(ns, 'workers')} {'MIN' if dest == 'min_workers' else 'MAX'}"  # typed as --nnodes MIN:MAX
    declared = SETTINGS.get(dest)
    if declared is not None and declared.flags:
        return declared.flags[0]
    return fallback or LAUNCHER_NAMES.get(dest, dest)


def _add_settings(p: argparse.ArgumentParser) -> None:
    """A flag for every job setting the command line takes: its spellings, default and help from the spec."""
    for name, declared in SETTINGS.items():
        if not declared.flags:
            continue
        form = {"action": Spelled, "default": default(name), "help": declared.doc, **FLAG_FORMS.get(name, {})}
        if form["action"] is Spelled:
            form.setdefault("type", _parsed_by(declared.codec.parse))
        shown = "" if form["default"] is None else declared.codec.encode(form["default"])
        if form["action"] is not SpelledFlag and shown:
            form["help"] += f"; default {shown}"
        p.add_argument(*declared.flags, dest=name, **form)


def build_parser() -> argparse.ArgumentParser:
    """The ``launch`` command line."""
    p = Parser(prog="python -m runtime launch", description=__doc__.split("\n\n")[0])
    p.set_defaults(spelled={}, nnodes_min=None)
    _add_settings(p)
    p.add_argument("--run-path", "--run_path", dest="run_path", action="store_true",
                   help="run SCRIPT (a path) under the interpreter, as torchrun's --run-path does; it wins over "
                        "--no-python")
    ignored = p.add_argument_group("torchrun options with no meaning here", "accepted as torchrun takes them, "
                                   "named in one notice line, and ignored, except --rdzv-endpoint, "
                                   "--node-rank and --local-addr on a per-node command line")
    for dest, flags, kind in (
        ("rdzv_backend", ("--rdzv-backend", "--rdzv_backend"), str),
        ("rdzv_endpoint", ("--rdzv-endpoint", "--rdzv_endpoint"), str),
        ("rdzv_conf", ("--rdzv-conf", "--rdzv_conf"), str),
        ("node_rank", ("--node-rank", "--node_rank"), INT),
        ("master_addr", ("--master-addr", "--master_addr"), str),
        ("local_addr", ("--local-addr", "--local_addr"), str),
        ("monitor_interval", ("--monitor-interval", "--monitor_interval"), SECONDS),
        ("start_method", ("--start-method", "--start_method"), START_METHODS),
        ("event_log_handler", ("--event-log-handler", "--event_log_handler"), str),
        ("logs_specs", ("--logs-specs", "--logs_specs"), str),
        ("numa_binding", ("--numa-binding", "--numa_binding"), NUMA_MODES),
    ):
        form = (_choice_form(kind) if isinstance(kind, tuple) else
                {"type": _parsed_by(kind.parse) if isinstance(kind, Codec) else kind})
        ignored.add_argument(*flags, dest=dest, default=None, action=Spelled,
                             help=PER_NODE_HELP.get(dest, IGNORED[dest]), **form)
    ignored.add_argument("--standalone", dest="standalone", action=SpelledFlag, const=True, default=False,
                         help=IGNORED["standalone"])
    p.add_argument("--pythonpath", action="append", default=[], metavar="DIR",
                   help="put DIR on the processes' PYTHONPATH (repeatable); in service mode, where the "
                        "functions called with the client are imported from")
    p.add_argument("-m", "--module", action="store_true", help="run SCRIPT as a module, like python -m")
    p.add_argument("script", metavar="SCRIPT", nargs="?",
                   help="batch mode: the training script (a module with -m, a command with --no-python)")
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="arguments for the script")
    return p


def validate(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> None:
    """Check the command line; calls ``parser.error`` (exit 2) naming the flag as typed and the fix.

    Resolves ``--nproc-per-node`` as torchrun counts it, ``--nnodes MIN:MAX`` into ``workers``,
    ``min_workers`` and ``max_workers``, and the grace period's default; then checks every job setting
    as the job spec does, then what only this launcher has (SCRIPT, ``--pythonpath``, the port block).
    """
    try:
        ns.num_proc = resolve_nproc(ns.num_proc)
    except ParseError as exc:
        parser.error(f"{flag(ns, 'num_proc')}: {exc.problem} (got {ns.num_proc!r}); {exc.fix}")
    if ns.grace_period is None:
        shutdown = os.environ.get(SHUTDOWN_TIMEOUT_ENV, "")
        try:
            ns.grace_period = SETTINGS["grace_period"].codec.parse(shutdown) if shutdown else default("grace_period")
        except ParseError as exc:
            parser.error(f"{SHUTDOWN_TIMEOUT_ENV}={shutdown!r} is invalid: {exc.problem}; {exc.fix}")
    if ns.master_port is None:
        ns.master_port = 0  # picked and reserved when the job starts (runtime.local.launch_plan.plan)
    if ns.run_path:
        ns.no_python = ns.module = False  # torchrun: --run-path runs SCRIPT as a path, whatever else is set
    workers = flag(ns, "workers")
    if ns.nnodes_min is not None:
        if not 1 <= ns.nnodes_min <= ns.workers:
            parser.error(f"{workers}: MIN:MAX needs 1 <= MIN <= MAX (got '{ns.nnodes_min}:{ns.workers}'); use a "
                         "MIN from 1 to MAX")
        if ns.min_workers is not None or ns.max_workers is not None:
            parser.error(f"{workers}: MIN:MAX and --min-workers/--max-workers both set the elastic bounds; "
                         f"use one of them")
        ns.min_workers, ns.max_workers = ns.nnodes_min, ns.workers
    try:
        jobs.LocalJobSpec(**_settings(ns, ns.job_name, ns.log_dir))
    except SpecError as exc:
        parser.error(_spec_line(ns, exc))
    for holds, subject, problem, fix in _launcher_checks(ns):
        if not holds:
            parser.error(f"{subject}: {problem}; {fix}")


def _spec_line(ns: argparse.Namespace, exc: SpecError) -> str:
    """The job spec's refusal as this command line says it, each setting named by the flag typed
    (``SpecError.line``); the elastic bounds typed as ``--nnodes MIN:MAX``, by that: its MIN and MAX, and a
    refusal of the bounds together (a single-controller job's) refuses ``--nnodes MIN:MAX``, whose fix is
    ``--nnodes N``."""
    if ns.nnodes_min is None or exc.subject != ELASTIC_BOUNDS:
        return exc.line(lambda name: flag(ns, name))
    problem, _ = exc.render(lambda name: flag(ns, name))
    nnodes = flag(ns, "workers")
    return (f"{nnodes}: {problem} (got '{ns.nnodes_min}:{ns.workers}'); give {nnodes} one number, e.g. "
            f"{nnodes} {ns.workers}")


def _launcher_checks(ns: argparse.Namespace) -> tuple[tuple[bool, str, str, str], ...]:
    """What only this launcher has (its ports on one machine, GPUs, directories, SCRIPT), each as
    ``(holds, subject, problem, fix)``: a refusal is worded ``subject: problem (got value); fix``, as
    ``SpecError.line`` words a refusal of the spec's ``(problem, fix)`` checks."""
    batch = ns.mode == "batch"
    master_port = flag(ns, "master_port")
    beyond = port_block(ns.master_port, ns.workers * ns.num_proc, free=True) or ("", "")
    return (
        (not beyond[0], master_port, f"{beyond[0]} (got {ns.master_port})", beyond[1].format(master_port=master_port)),
        (not ns.virtual_local_rank or _gpus_for(ns.num_proc), "--virtual-local-rank",
         f"{contract.CUDA_VISIBLE_DEVICES}={os.environ.get(contract.CUDA_VISIBLE_DEVICES)} names fewer GPUs than the "
         f"{ns.num_proc} processes per node", "name one per process or unset it"),
        *((Path(d).is_dir(), "--pythonpath", f"no such directory (got {d!r})", "name an existing directory")
          for d in ns.pythonpath),
        (batch or ns.script is None, "SCRIPT", f"service mode runs no script (got {ns.script!r})",
         "call functions with runtime.client.JobClient"),
        (not (ns.module and ns.no_python), "--no-python", "runs a command, not a module", "drop -m or --no-python"),
        (not batch or ns.module or ns.no_python or (ns.script is not None and Path(ns.script).is_file()),
         "SCRIPT", f"no such file (got {ns.script!r})", "use -m for a module, --no-python for a command"),
    )


def _gpus_for(num_proc: int) -> bool:
    """Whether ``CUDA_VISIBLE_DEVICES`` (if set) names a GPU for each of ``num_proc`` processes."""
    visible = os.environ.get(contract.CUDA_VISIBLE_DEVICES)
    return visible is None or len(visible.split(",")) >= num_proc


def job_log_dir(base: Optional[str], job: str) -> Optional[str]:
    """``--log-dir`` as torchrun takes it: a base directory, in which each run gets a directory of its
    own, ``<job id>_<random>`` (so reusing the base never mixes two runs); ``None`` without one."""
    if base is None:
        return None
    os.makedirs(base, exist_ok=True)
    return tempfile.mkdtemp(prefix=f"{job}_", dir=base)


def _settings(ns: argparse.Namespace, job: Optional[str], log_dir: Optional[str]) -> dict[str, Any]:
    """The local job's settings the command line gives, by name."""
    entrypoint = (["-m", ns.script] if ns.module else [ns.script]) + list(ns.args) if ns.script else []
    values = {name: getattr(ns, name) for name, declared in SETTINGS.items() if declared.flags}
    values.update(job_name=job, log_dir=log_dir, entrypoint=tuple(entrypoint), daemon_args=tuple(ns.daemon_args))
    return {**values, "pythonpath": tuple(str(Path(d).resolve()) for d in ns.pythonpath),
            "forward_stdin": ns.mode == "batch"}


def spec_from_args(ns: argparse.Namespace) -> jobs.LocalJobSpec:
    """The local job the (validated) command line describes; makes its log directory."""
    job = ns.job_name or f"local-{uuid.uuid4().hex[:8]}"
    return jobs.LocalJobSpec(**_settings(ns, job, job_log_dir(ns.log_dir, job)))


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run a job locally; return its exit code (0, the root cause's code, or one of the launcher's:
    ``runtime.local.outcome.Outcome``, whose line ends the output of a failed job)."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    validate(parser, ns)
    endpoint = hosts.endpoint_of(parser, ns)
    notice = ignored_notice(ns, hosts.USED if endpoint else ())
    if notice:
        print(notice, file=sys.stderr, flush=True)
    spec = spec_from_args(ns)
    if endpoint is not None:
        return hosts.run(parser, spec, endpoint, ns.node_rank, ns.local_addr)
    try:
        job = jobs.start(spec)
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
    outcome = job.supervise()
    if outcome.exit_code:
        print(outcome.line(), file=sys.stderr, flush=True)
    return outcome.exit_code
