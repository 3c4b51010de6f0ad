"""The job spec: every setting a job's front ends share, declared once. Standard library only.

Each field of :class:`JobSpec` is one setting (``setting.Setting``): name, type and default are the
field's; doc, the agent's environment variable and its encoding, the command-line spellings and
the check are its metadata. The launcher's flags (``runtime.local.launch``), ``LocalJobSpec``
(``runtime.local.jobs``), ``Compute`` (``runtime.workflow``), the agent's settings (``spec.agent_settings``) and
the environment both the launcher and the pod renderer give an agent (``spec.env_writer``) are
built from it; a front end adds settings of its own, never a shared one's default or check.
:func:`problem` checks one value as every front end does, and :class:`errors.SpecError` words the
answer in the front end's names.

One default per setting. ``quorum_timeout`` is 300 s everywhere (it was 60 s for local jobs): on a
cluster a world forms once every pod is scheduled and its image pulled, which takes minutes; torchrun
itself waits 600 s for a rendezvous (torch 2.13.0 ``torch/distributed/elastic/rendezvous/
dynamic_rendezvous.py``, ``join`` timeout); a local world forms in about a second, so locally the
default only matters when something is wrong.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from typing import Any, NamedTuple, Optional

from runtime.agent import contract
from runtime.agent.errors import SpecError
from runtime.agent.spec import streams
from runtime.agent.spec.ports import base_port
from runtime.agent.spec.setting import (
    BOOL,
    FILTERS,
    INT,
    RANKS,
    SECONDS,
    STD,
    STRINGS,
    Setting,
    flag,
    one_of,
    parses,
    seconds,
    setting,
    strings,
    text,
    whole,
)
from runtime.agent.spec.signals import DEFAULT_SIGNALS, parse_signals

MODES = ("batch", "service")
"""``batch`` runs the entrypoint on every rank to completion; ``service`` keeps processes up for calls."""
DISTRIBUTIONS = ("spmd", "pytorch", "jax", "tensorflow", "ray", "monarch")
"""Which framework's variables a job's processes get; ``spmd`` sets every framework's."""
SINGLE_CONTROLLER = ("ray", "monarch")
"""Distributions with one driver process, on node 0; every node runs the framework's daemon
(``runtime.agent.execution.controller``), and the driver's exit decides the job."""
DEFAULT_ROLE = "default"
"""torchrun's ``--role`` default: the workers' ``ROLE_NAME``."""


class Rule(NamedTuple):
    """A rule between settings: when it does not hold, ``name``'s value is the one refused, with the parts of
    an ``errors.SpecError``.

    Attributes:
        name: the setting refused.
        holds: whether the spec keeps the rule.
        problem: what is wrong, alone (no fix in it); ``{name}`` names a setting.
        fix: how to put it right.
        subject: the settings the problem is about; ``{name}`` when empty.
        shows_value: whether a front end adds the refused value to the problem.
    """

    name: str
    holds: bool
    problem: str
    fix: str
    subject: str = ""
    shows_value: bool = True


ELASTIC_BOUNDS = "{min_workers}/{max_workers}"
"""The subject of a rule about the elastic bounds together (a front end may take them in one value, as the
launcher's ``--nnodes MIN:MAX``)."""
EVERY_STREAM_SHOWN = streams.StdChoice()
"""``--redirects``/``--tee`` 0: no stream of any rank to a file."""


@dataclass(frozen=True)
class JobSpec:
    """What a job is, whichever front end describes it. Checked on construction.

    Raises:
        SpecError: the first invalid setting, naming it, the value, the problem and the fix.
    """

    job_name: Optional[str] = setting(
        None, env=contract.JOB_NAME, flags=("--job-name", "--rdzv-id", "--rdzv_id"), optional=True,
        check=text("name the job, e.g. digits"),
        doc="the job's id (TORCHELASTIC_RUN_ID); unset, the front end names it (local-<random> on this machine)")
    workers: int = setting(
        1, env=contract.WORKERS, codec=INT, flags=("--workers", "--nnodes"),
        check=whole(1, "use 1 or more nodes"), doc="nodes (agents; pods on Kubernetes) in the job")
    num_proc: int = setting(
        1, env=contract.NUM_PROC, codec=INT, flags=("--num-proc", "--nproc-per-node", "--nproc_per_node"),
        check=whole(1, "use 1 or more processes per node"), doc="processes per node")
    mode: str = setting(
        "batch", env=contract.MODE, flags=("--mode",), check=one_of(MODES),
        doc="batch runs the entrypoint on every rank; service keeps processes up for calls")
    distribution: str = setting(
        "spmd", env=contract.DISTRIBUTION, flags=("--distribution",), check=one_of(DISTRIBUTIONS),
        doc="which framework's variables to set; spmd sets all. ray and monarch run the entrypoint once, on "
            "node 0, as the driver of a Ray cluster or Monarch host mesh spanning every node (num_proc 1)")
    entrypoint: tuple[str, ...] = setting(
        (), env=contract.ENTRYPOINT, codec=STRINGS, check=strings("give the command as a list of strings"),
        doc="batch mode: the user command after the interpreter (script.py args, or -m module args), or with "
            "no_python a whole argv")
    no_python: bool = setting(
        False, env=contract.NO_PYTHON, codec=BOOL, flags=("--no-python", "--no_python"), check=flag,
        doc="run the entrypoint as a command found on PATH instead of under the interpreter (torchrun's "
            "--no-python); batch mode only")
    quorum_workers: Optional[int] = setting(
        None, env=contract.QUORUM_WORKERS, codec=INT, flags=("--quorum-workers",), optional=True,
        check=whole(1, "use 1 or more nodes"), doc="nodes that must register before the world forms; unset: all")
    quorum_timeout: float = setting(
        300.0, env=contract.QUORUM_TIMEOUT, codec=SECONDS, flags=("--quorum-timeout",),
        check=seconds(0, "use seconds > 0", inclusive=False), doc="seconds to wait for the quorum")
    timeout: Optional[float] = setting(
        None, env=contract.TIMEOUT, codec=SECONDS, flags=("--timeout",), optional=True,
        check=seconds(0, "use seconds > 0", inclusive=False),
        doc="the job's time limit, from the coordinator's start: past it the job fails with exit code 124 and a "
            "report of the ranks still running (on Kubernetes, active_deadline_seconds sets it); unset: none")
    hang_report_after: float = setting(
        60.0, env=contract.HANG_REPORT_AFTER, codec=SECONDS, flags=("--hang-report-after",),
        check=seconds(0, "use seconds > 0", inclusive=False),
        doc="once a rank has finished, report every rank that has neither exited nor written output for this many "
            "seconds (which rank, on which node, silent since when)")
    max_restarts: int = setting(
        0, env=contract.MAX_RESTARTS, codec=INT, flags=("--max-restarts", "--max_restarts"),
        check=whole(0, "use 0 or more"),
        doc="fixed-size: restarts of the whole world after a failure; elastic: each node's failure budget, "
            "counted as torchrun counts (its per-agent restarts)")
    min_workers: Optional[int] = setting(
        None, env=contract.MIN_WORKERS, codec=INT, flags=("--min-workers",), optional=True,
        check=whole(1, "use 1 or more nodes"),
        doc="elastic: the job continues while at least this many nodes remain; unset: not elastic")
    max_workers: Optional[int] = setting(
        None, env=contract.MAX_WORKERS, codec=INT, flags=("--max-workers",), optional=True,
        check=whole(1, "use 1 or more nodes"),
        doc="elastic: late nodes are admitted up to this many; unset: not elastic")
    master_port: int = setting(
        contract.DEFAULT_MASTER_PORT, env=contract.MASTER_PORT, codec=INT, flags=("--master-port", "--master_port"),
        check=base_port(free=True),
        doc="rendezvous port on node 0 (TCP), the base of the ports the job counts up from; 0 picks a free one "
            "when the job starts on this machine")
    monitor_members: bool = setting(
        True, env=contract.MONITOR_MEMBERS, codec=BOOL, flags=("--no-monitor-members",), check=flag,
        doc="raise WorkerMembershipChanged in user processes on a membership change (runtime.membership.poll "
            "works either way)")
    heartbeat_interval: float = setting(
        0.25, env=contract.HEARTBEAT_INTERVAL, codec=SECONDS,
        check=seconds(0, "use seconds > 0", inclusive=False), doc="seconds between heartbeats right after a change")
    heartbeat_ttl: float = setting(
        3.0, env=contract.HEARTBEAT_TTL, codec=SECONDS, flags=("--heartbeat-ttl",),
        check=seconds(0, "use seconds > 0", inclusive=False),
        doc="seconds without a heartbeat before a node is dead (removed after twice this)")
    grace_period: float = setting(
        5.0, env=contract.GRACE_PERIOD, codec=SECONDS, flags=("--grace-period", "--shutdown-timeout",
                                                              "--shutdown_timeout"),
        check=seconds(0, "use 0 or more seconds"),
        doc="seconds between the stop signal and SIGKILL at teardown (and for a cancelled call to unwind)")
    tree_threshold: int = setting(
        contract.DEFAULT_TREE_THRESHOLD, env=contract.TREE_THRESHOLD, codec=INT, flags=("--tree-threshold",),
        check=whole(1, "use 1 or more nodes"),
        doc="calls to, worlds pushed to and liveness from this many nodes or more travel a tree")
    tree_fanout: int = setting(
        contract.DEFAULT_TREE_FANOUT, env=contract.TREE_FANOUT, codec=INT, flags=("--tree-fanout",),
        check=whole(2, "use 2 or more children per node"), doc="children per node in the tree")
    allow_pickle: bool = setting(
        False, env=contract.ALLOW_PICKLE, codec=BOOL, flags=("--allow-pickle",), check=flag,
        doc="service mode: accept pickled arguments from token holders (otherwise JSON only)")
    log_dir: Optional[str] = setting(
        None, env=contract.LOG_DIR, flags=("--log-dir", "--log_dir"), optional=True, check=text("name a directory"),
        doc="where per-process logs go; unset: none in a pod, a temporary directory on this machine")
    role: str = setting(
        DEFAULT_ROLE, env=contract.ROLE, flags=("--role",), check=text("name the workers' role, e.g. default"),
        doc="the workers' role (ROLE_NAME)")
    signals_to_handle: str = setting(
        DEFAULT_SIGNALS, env=contract.TORCHELASTIC_SIGNALS_TO_HANDLE, flags=("--signals-to-handle",
                                                                             "--signals_to_handle"),
        check=parses(parse_signals, "use signal names, e.g. SIGTERM,SIGUSR1"),
        doc="signals passed on to every rank, comma-separated; SIGTERM, SIGINT, SIGHUP and SIGQUIT stop the job, "
            "any other (SIGUSR1, SIGUSR2: a scheduler's preemption notice) reaches every rank and the job goes on")
    virtual_local_rank: bool = setting(
        False, env=contract.VIRTUAL_LOCAL_RANK, codec=BOOL, flags=("--virtual-local-rank", "--virtual_local_rank"),
        check=flag, doc="every process gets LOCAL_RANK 0 and CUDA_VISIBLE_DEVICES naming its one GPU")
    redirects: streams.StdChoice = setting(
        EVERY_STREAM_SHOWN, env=contract.REDIRECTS, codec=STD, flags=("-r", "--redirects"),
        doc="streams of ranks written to files only (torchrun's form: 0 none, 1 stdout, 2 stderr, 3 both, or "
            "LOCAL_RANK:N,...)")
    tee: streams.StdChoice = setting(
        EVERY_STREAM_SHOWN, env=contract.TEE, codec=STD, flags=("-t", "--tee"),
        doc="streams written to files and the console (the same form)")
    local_ranks_filter: Optional[frozenset[int]] = setting(
        None, env=contract.LOCAL_RANKS_FILTER, codec=RANKS, flags=("--local-ranks-filter", "--local_ranks_filter"),
        optional=True, doc="only these local ranks' output reaches the console, e.g. 0 or 0,1 (files are still "
                           "written); unset: all")
    stdout_filters: tuple[str, ...] = setting(
        (), env=contract.STDOUT_FILTERS, codec=FILTERS, flags=("--duplicate-stdout-filters",
                                                               "--duplicate_stdout_filters"),
        doc="stdout lines holding one of these comma-separated strings are also written to filtered_stdout.log "
            "(,, for a comma)")
    stderr_filters: tuple[str, ...] = setting(
        (), env=contract.STDERR_FILTERS, codec=FILTERS, flags=("--duplicate-stderr-filters",
                                                               "--duplicate_stderr_filters"),
        doc="the same for stderr, filtered_stderr.log")
    daemon_args: tuple[str, ...] = setting(
        (), env=contract.DAEMON_ARGS, codec=STRINGS, flags=("--daemon-arg",),
        check=strings("give the arguments as a list of strings"),
        doc="ray: arguments appended to every node's `ray start`")

    def __post_init__(self) -> None:
        for f in fields(self):
            found = SETTINGS[f.name].problem(getattr(self, f.name)) if f.name in SETTINGS else None
            if found is not None:
                raise SpecError(f.name, getattr(self, f.name), *found)
        for rule in self.rules():
            if not rule.holds:
                raise SpecError(rule.name, getattr(self, rule.name), rule.problem, rule.fix, rule.subject,
                                rule.shows_value)

    def rules(self) -> tuple[Rule, ...]:
        """Every rule between settings, in the order they are checked, each worded for this spec's values
        whether it holds or not."""
        workers, dist, single = self.workers, self.distribution, self.distribution in SINGLE_CONTROLLER
        return (
            Rule("quorum_workers", self.quorum_workers is None or self.quorum_workers <= workers,
                 f"must be from 1 to {{workers}} ({workers})",
                 f"use a quorum from 1 to the number of nodes ({workers})"),
            Rule("quorum_workers", self.quorum_workers is None or self.elastic or self.quorum_workers >= workers,
                 f"a fixed-size job forms its world with the first {self.quorum_workers} nodes and refuses the "
                 f"other {workers - (self.quorum_workers or workers)} (their agents exit 3)",
                 f"unset {{quorum_workers}} (wait for all {workers}), or make the job elastic with "
                 f"{{min_workers}} <= {self.quorum_workers} and {{max_workers}} >= {workers}"),
            Rule("quorum_workers", self.quorum_workers is None or self.min_workers is None
                 or self.quorum_workers >= self.min_workers,
                 f"the world would form with fewer nodes than {{min_workers}} ({self.min_workers}), the fewest "
                 "it may run with",
                 f"use a quorum of at least {self.min_workers}, or lower {{min_workers}}"),
            Rule("min_workers", self.min_workers is None or self.min_workers <= workers,
                 f"must be from 1 to {{workers}} ({workers})", "use {min_workers} <= {workers} <= {max_workers}"),
            Rule("max_workers", self.max_workers is None or self.max_workers >= workers,
                 f"must be at least {{workers}} ({workers})", "use {min_workers} <= {workers} <= {max_workers}"),
            Rule("heartbeat_ttl", self.heartbeat_ttl >= 4 * self.heartbeat_interval,
                 f"must be at least 4 x {{heartbeat_interval}} ({4 * self.heartbeat_interval:g} s)",
                 f"use at least 4 x the heartbeat interval ({4 * self.heartbeat_interval:g} s)"),
            Rule("entrypoint", bool(self.entrypoint) or self.mode != "batch", "batch mode needs a command to run",
                 "name a script or -m module"),
            Rule("no_python", not self.no_python or self.mode == "batch",
                 "runs a command, and service mode runs none",
                 "unset it in service mode, whose processes run the call loop", shows_value=False),
            Rule("num_proc", not single or self.num_proc == 1,
                 f"a {dist} job runs one driver process, on node 0, and {dist}'s own workers on every node",
                 "set {num_proc} to 1"),
            Rule("min_workers", not single or not self.elastic, f"a {dist} job cannot be elastic (its head is node 0)",
                 "unset {min_workers} and {max_workers}", subject=ELASTIC_BOUNDS, shows_value=False),
            Rule("daemon_args", not self.daemon_args or dist == "ray",
                 f"applies to {{distribution}} ray only: the arguments go to `ray start` (got {{distribution}} {dist})",
                 "unset {daemon_args}, or use {distribution} ray", shows_value=False),
        )

    @property
    def quorum(self) -> int:
        """Nodes needed before the world forms: ``quorum_workers``, or every node."""
        return self.workers if self.quorum_workers is None else self.quorum_workers

    @property
    def elastic(self) -> bool:
        """Whether the world may shrink and grow: ``min_workers`` or ``max_workers`` is set."""
        return self.min_workers is not None or self.max_workers is not None

    @property
    def min_nodes(self) -> int:
        """The fewest nodes the job may run with."""
        return self.quorum if self.min_workers is None else self.min_workers

    @property
    def max_nodes(self) -> int:
        """The most nodes the job may have (node ids range below it)."""
        return self.workers if self.max_workers is None else self.max_workers

    def local_world_size(self, node_id: int) -> int:
        """User processes (ranks) node ``node_id`` runs: ``num_proc``, or for a single-controller job 1 on
        node 0 (the driver) and 0 elsewhere (the daemon only)."""
        if self.distribution not in SINGLE_CONTROLLER:
            return self.num_proc
        return 1 if node_id == 0 else 0

    @property
    def outputs(self) -> streams.Streams:
        """Where the ranks' stdout and stderr go (torchrun's output options together)."""
        return streams.Streams(self.redirects, self.tee, self.local_ranks_filter, self.stdout_filters,
                               self.stderr_filters)


SETTINGS: dict[str, Setting] = {f.name: f.metadata["setting"] for f in fields(JobSpec)}
"""Every job setting's declaration, by name, in declaration order."""


def default(name: str) -> Any:
    """The one default of setting ``name``.

    Raises:
        KeyError: no such setting.
    """
    for f in fields(JobSpec):
        if f.name == name:
            return f.default if f.default is not MISSING else None
    raise KeyError(name)


def problem(name: str, value: Any) -> Optional[tuple[str, str]]:
    """``(problem, fix)`` when ``value`` is not a good value of setting ``name`` on its own (as
    :class:`JobSpec` checks it), else ``None``; ``{name}`` in them names another setting
    (``errors.SpecError.render``).

    Raises:
        KeyError: no such setting.
    """
    return SETTINGS[name].problem(value)


def check(name: str, value: Any) -> None:
    """Check one value of setting ``name`` as :class:`JobSpec` does.

    Raises:
        SpecError: it is not a good value.
        KeyError: no such setting.
    """
    found = problem(name, value)
    if found is not None:
        raise SpecError(name, value, *found)
