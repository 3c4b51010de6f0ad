"""Agent settings: a frozen, validated dataclass, read from the environment at the entrypoint only.

Standard library only. In pods every setting comes from env vars named in ``contract.py`` (set by the
``DistributedJob`` component); the local launcher sets the same variables for its agent processes,
so both paths exercise one contract.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass, field
from typing import Mapping, Optional

from runtime.agent import contract, streams, torchrun
from runtime.agent.controller import local_world_size
from runtime.agent.errors import ConfigError
from runtime.agent.world import DEFAULT_ROLE, DISTRIBUTIONS, SINGLE_CONTROLLER

MODES = ("batch", "service")
_ORDINAL = re.compile(r"-(\d+)$")


@dataclass(frozen=True)
class AgentSettings:
    """Everything one agent needs. Validated on construction.

    Attributes:
        job: job id; DNS-1123 friendly text.
        token: the job's bearer token; every route but ``/healthz`` requires it.
        node_id: this node's stable index, ``0 <= node_id < workers``; node 0 is the coordinator.
        workers: nodes (pods) in the job.
        num_proc: user processes on this node.
        entrypoint: the user command after the interpreter, e.g. ``("train.py", "--lr", "0.1")`` or
            ``("-m", "pkg.train")``; with ``no_python``, a whole argv such as ``("bash", "-c", "...")``.
            Batch mode only; service mode runs the call loop instead.
        coordinator: host name or address of node 0's agent.
        coordinator_port: node 0's agent port (TCP).
        agent_port: this agent's HTTP port (TCP).
        advertise_address: the address peers reach this node at.
        bind_address: the address the HTTP server binds; ``""`` for all interfaces.
        master_port: torch rendezvous port on node 0 (TCP).
        quorum_workers: nodes that must register before the world forms (default: ``workers``).
        quorum_timeout: seconds to wait for quorum.
        max_restarts: restarts of the whole world after a failure.
        distribution: one of ``spmd``, ``pytorch``, ``jax``, ``tensorflow``, ``ray``, ``monarch``.
            The last two are single-controller (``runtime.agent.controller``): ``num_proc`` must be
            1 and the job cannot be elastic.
        mode: ``batch`` or ``service``.
        tree_threshold: calls to, and liveness from, at least this many nodes travel a tree.
        tree_fanout: children per node in the tree.
        allow_pickle: service mode: accept pickled arguments (from token-holding peers only).
        log_dir: directory for per-rank log files, or ``None`` for none.
        monitor_members: deliver membership changes into user processes.
        grace_period: seconds between SIGTERM and SIGKILL at teardown.
        die_with_parent: exit when the parent process (the local launcher) dies.
        resolve: host name to address overrides consulted before DNS (tests, local mode).
        min_workers: elastic jobs: the fewest nodes the job may continue with; ``None`` with
            ``max_workers`` also ``None`` means a fixed-size job, where losing a node fails it.
        max_workers: elastic jobs: the most nodes that may be admitted; node ids range below it.
        heartbeat_interval: seconds between heartbeats right after a change (then backed off).
        heartbeat_ttl: seconds without a heartbeat before a node is dead; removed after twice this.
        verdict_file: local mode: path where the agent writes the job's final verdict as JSON.
        no_python: run ``entrypoint`` directly (looked up on ``PATH``) instead of under the
            interpreter, like torchrun's ``--no-python``. Batch mode only.
        run_root: directory in which the agent makes its private run directory (the world files its
            processes read); ``None`` for the system's temporary directory. A launcher that owns
            one removes what an agent killed by SIGKILL could not.
        role: the workers' role (torchrun's ``--role``), their ``ROLE_NAME``.
        signals_to_handle: torchrun's ``--signals-to-handle``, e.g. ``SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1``:
            the signals this agent passes on to every rank (``runtime.agent.torchrun``).
        virtual_local_rank: torchrun's ``--virtual-local-rank``: every process gets ``LOCAL_RANK`` 0
            and ``CUDA_VISIBLE_DEVICES`` naming its one GPU.
        outputs: where the ranks' stdout and stderr go (torchrun's ``--redirects``, ``--tee``,
            ``--local-ranks-filter``, ``--duplicate-std*-filters``); files need ``log_dir``.
        forward_stdin: local mode: global rank 0 inherits this agent's stdin (the launcher's), as
            under torchrun, so ``breakpoint()`` works there; every other process reads EOF.
    """

    job: str
    token: str
    node_id: int
    workers: int
    num_proc: int
    entrypoint: tuple[str, ...]
    coordinator: str
    coordinator_port: int = contract.AGENT_PORT
    agent_port: int = contract.AGENT_PORT
    advertise_address: str = "127.0.0.1"
    bind_address: str = ""
    master_port: int = contract.DEFAULT_MASTER_PORT
    quorum_workers: Optional[int] = None
    quorum_timeout: float = 300.0
    max_restarts: int = 0
    distribution: str = "spmd"
    mode: str = "batch"
    tree_threshold: int = contract.DEFAULT_TREE_THRESHOLD
    tree_fanout: int = contract.DEFAULT_TREE_FANOUT
    allow_pickle: bool = False
    log_dir: Optional[str] = None
    monitor_members: bool = True
    grace_period: float = 5.0
    die_with_parent: bool = False
    resolve: Mapping[str, str] = field(default_factory=dict)
    min_workers: Optional[int] = None
    max_workers: Optional[int] = None
    heartbeat_interval: float = 0.25
    heartbeat_ttl: float = 3.0
    verdict_file: Optional[str] = None
    run_root: Optional[str] = None
    no_python: bool = False
    daemon_args: tuple[str, ...] = ()
    daemon_prefix: tuple[str, ...] = ()
    role: str = DEFAULT_ROLE
    signals_to_handle: str = torchrun.DEFAULT_SIGNALS
    virtual_local_rank: bool = False
    outputs: streams.Streams = field(default_factory=streams.Streams)
    forward_stdin: bool = False

    def __post_init__(self) -> None:
        _require(bool(self.job), contract.JOB_NAME, self.job, "set a non-empty job name")
        _require(bool(self.token), contract.TOKEN, "<empty>", "set the job's bearer token")
        _require(self.workers >= 1, contract.WORKERS, self.workers, "use 1 or more nodes")
        _require(
            0 <= self.node_id < self.max_nodes,
            contract.NODE_RANK_SETTING,
            self.node_id,
            f"use a node rank from 0 to {self.max_nodes - 1}",
        )
        _require(self.heartbeat_interval > 0, contract.HEARTBEAT_INTERVAL, self.heartbeat_interval, "use seconds > 0")
        _require(
            self.heartbeat_ttl >= 4 * self.heartbeat_interval,
            contract.HEARTBEAT_TTL,
            self.heartbeat_ttl,
            f"use at least 4 x the heartbeat interval ({4 * self.heartbeat_interval:g} s)",
        )
        _require(self.num_proc >= 1, contract.NUM_PROC, self.num_proc, "use 1 or more processes per node")
        _require(
            bool(self.entrypoint) or self.mode == "service", contract.ENTRYPOINT, list(self.entrypoint),
            "name a script or -m module",
        )
        _require(
            not self.no_python or self.mode == "batch", contract.NO_PYTHON, self.no_python,
            "unset it in service mode, whose processes run the call loop",
        )
        for name, port in (
            (contract.AGENT_PORT_SETTING, self.agent_port),
            (contract.MASTER_PORT, self.master_port),
            (contract.COORDINATOR_HOST, self.coordinator_port),
        ):
            _require(1 <= port <= 65535, name, port, "use a TCP port from 1 to 65535")
        _require(
            1 <= self.quorum <= self.workers,
            contract.QUORUM_WORKERS,
            self.quorum_workers,
            f"use a quorum from 1 to the number of nodes ({self.workers})",
        )
        _require(
            1 <= self.min_nodes <= self.workers <= self.max_nodes,
            contract.MIN_WORKERS,
            f"{self.min_workers}..{self.max_workers} with {self.workers} workers",
            "use min_workers <= workers <= max_workers",
        )
        _require(self.quorum_timeout > 0, contract.QUORUM_TIMEOUT, self.quorum_timeout, "use seconds > 0")
        _require(self.max_restarts >= 0, contract.MAX_RESTARTS, self.max_restarts, "use 0 or more")
        _require(
            self.distribution in DISTRIBUTIONS,
            contract.DISTRIBUTION,
            self.distribution,
            f"use one of {', '.join(DISTRIBUTIONS)}",
        )
        _require(self.mode in MODES, contract.MODE, self.mode, f"use one of {', '.join(MODES)}")
        if self.distribution in SINGLE_CONTROLLER:
            _require(self.num_proc == 1, contract.NUM_PROC, self.num_proc,
                     f"a {self.distribution} job runs one driver process, on node 0, and {self.distribution}'s "
                     "own workers on every node; use 1")
            _require(not self.elastic, contract.MIN_WORKERS, f"{self.min_workers}..{self.max_workers}",
                     f"a {self.distribution} job cannot be elastic (its head is node 0); unset "
                     f"{contract.MIN_WORKERS} and {contract.MAX_WORKERS}")
        _require(not self.daemon_args or self.distribution == "ray", contract.DAEMON_ARGS, list(self.daemon_args),
                 f"daemon arguments go to `ray start`, and this job's distribution is {self.distribution!r}; "
                 "unset it")
        _require(bool(self.role), contract.ROLE, self.role, "name the workers' role, e.g. default")
        try:
            torchrun.parse_signals(self.signals_to_handle)
        except ValueError as exc:
            raise ConfigError(f"{contract.TORCHELASTIC_SIGNALS_TO_HANDLE}={self.signals_to_handle!r} is invalid: "
                              f"{exc}") from None
        _require(not self.outputs.writes_files or bool(self.log_dir), contract.REDIRECTS,
                 self.outputs.redirects.encode(), f"set {contract.LOG_DIR}: redirected and teed streams are "
                 "written to files there")
        _require(self.tree_threshold >= 1, contract.TREE_THRESHOLD, self.tree_threshold, "use 1 or more nodes")
        _require(self.tree_fanout >= 2, contract.TREE_FANOUT, self.tree_fanout, "use 2 or more children per node")

    @property
    def quorum(self) -> int:
        """Nodes needed before the world forms."""
        return self.workers if self.quorum_workers is None else self.quorum_workers

    @property
    def elastic(self) -> bool:
        """Whether the world may shrink and grow (``min_workers`` or ``max_workers`` set)."""
        return self.min_workers is not None or self.max_workers is not None

    @property
    def min_nodes(self) -> int:
        """The fewest nodes the job may run with."""
        return self.quorum if self.min_workers is None else self.min_workers

    @property
    def max_nodes(self) -> int:
        """The most nodes the job may have."""
        return self.workers if self.max_workers is None else self.max_workers

    @property
    def local_world_size(self) -> int:
        """User processes (ranks) this node runs: ``num_proc``, or for a single-controller job 1 on
        node 0 (the driver) and 0 elsewhere."""
        return local_world_size(self.distribution, self.node_id, self.num_proc)

    @property
    def is_coordinator(self) -> bool:
        """Node 0 coordinates."""
        return self.node_id == 0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> AgentSettings:
        """Read settings from environment variables named in ``contract.py``.

        Node id: ``TRAINPLANE_NODE_RANK``, else ``JOB_COMPLETION_INDEX`` (Indexed Job), else ``RANK``
        (set by the Kubeflow training operator on PyTorchJob replicas: Master 0, Worker i+1; read
        before the pod name, since ``<job>-worker-0`` ends in 0), else the ordinal suffix of
        ``POD_NAME`` (StatefulSet). Coordinator: ``TRAINPLANE_COORDINATOR``
        (``host`` or ``host:port``), else the operator's ``MASTER_ADDR``.

        Raises:
            ConfigError: a variable is missing or malformed; the message names it.
        """
        coordinator = env.get(contract.COORDINATOR_HOST) or env.get(contract.MASTER_ADDR, "")
        _require(
            bool(coordinator),
            contract.COORDINATOR_HOST,
            "<unset>",
            "set it to node 0's host name (e.g. <job>-0.<service>)",
        )
        agent_port = _int(env, contract.AGENT_PORT_SETTING, contract.AGENT_PORT)
        host, _, port_text = coordinator.rpartition(":") if _has_port(coordinator) else (coordinator, "", "")
        coordinator_port = _parse_int(contract.COORDINATOR_HOST, port_text) if port_text else agent_port
        pod_ip = env.get(contract.POD_IP, "")
        advertise = env.get(contract.ADVERTISE_ADDRESS) or pod_ip or "127.0.0.1"
        bind = env.get(contract.BIND_ADDRESS)
        if bind is None:
            bind = advertise if _is_loopback(advertise) else ""
        return cls(
            job=env.get(contract.JOB_NAME, ""),
            token=env.get(contract.TOKEN, ""),
            node_id=_node_id(env),
            workers=_int(env, contract.WORKERS, 1),
            num_proc=_int(env, contract.NUM_PROC, 1),
            entrypoint=_string_list(env, contract.ENTRYPOINT, '["train.py"]'),
            coordinator=host,
            coordinator_port=coordinator_port,
            agent_port=agent_port,
            advertise_address=advertise,
            bind_address=bind,
            master_port=_int(env, contract.MASTER_PORT, contract.DEFAULT_MASTER_PORT),
            quorum_workers=_optional_int(env, contract.QUORUM_WORKERS),
            quorum_timeout=_float(env, contract.QUORUM_TIMEOUT, 300.0),
            max_restarts=_int(env, contract.MAX_RESTARTS, 0),
            distribution=env.get(contract.DISTRIBUTION, "spmd"),
            mode=env.get(contract.MODE, "batch"),
            tree_threshold=_int(env, contract.TREE_THRESHOLD, contract.DEFAULT_TREE_THRESHOLD),
            tree_fanout=_int(env, contract.TREE_FANOUT, contract.DEFAULT_TREE_FANOUT),
            allow_pickle=_bool(env, contract.ALLOW_PICKLE, False),
            log_dir=env.get(contract.LOG_DIR) or None,
            monitor_members=_bool(env, contract.MONITOR_MEMBERS, True),
            grace_period=_float(env, contract.GRACE_PERIOD, 5.0),
            die_with_parent=_bool(env, contract.DIE_WITH_PARENT, False),
            resolve=_resolve(env.get(contract.RESOLVE, "")),
            min_workers=_optional_int(env, contract.MIN_WORKERS),
            max_workers=_optional_int(env, contract.MAX_WORKERS),
            heartbeat_interval=_float(env, contract.HEARTBEAT_INTERVAL, 0.25),
            heartbeat_ttl=_float(env, contract.HEARTBEAT_TTL, 3.0),
            verdict_file=env.get(contract.VERDICT_FILE) or None,
            run_root=env.get(contract.RUN_ROOT) or None,
            no_python=_bool(env, contract.NO_PYTHON, False),
            daemon_args=_string_list(env, contract.DAEMON_ARGS),
            daemon_prefix=_string_list(env, contract.DAEMON_PREFIX),
            role=env.get(contract.ROLE) or DEFAULT_ROLE,
            signals_to_handle=env.get(contract.TORCHELASTIC_SIGNALS_TO_HANDLE) or torchrun.DEFAULT_SIGNALS,
            virtual_local_rank=_bool(env, contract.VIRTUAL_LOCAL_RANK, False),
            outputs=_outputs(env),
            forward_stdin=_bool(env, contract.FORWARD_STDIN, False),
        )


def _require(ok: bool, name: str, value: object, fix: str) -> None:
    if not ok:
        raise ConfigError(f"{name}={value!r} is invalid: {fix}")


def _parse_int(name: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"{name}={text!r} is not a whole number") from None


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name)
    return default if text in (None, "") else _parse_int(name, text)


def _optional_int(env: Mapping[str, str], name: str) -> Optional[int]:
    text = env.get(name)
    return None if text in (None, "") else _parse_int(name, text)


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    text = env.get(name)
    if text in (None, ""):
        return default
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"{name}={text!r} is not a number of seconds") from None


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    text = env.get(name, "").strip().lower()
    if not text:
        return default
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}={text!r} is invalid: use true or false")


def _node_id(env: Mapping[str, str]) -> int:
    for name in (contract.NODE_RANK_SETTING, contract.JOB_COMPLETION_INDEX):
        if env.get(name):
            return _parse_int(name, env[name])
    if env.get(contract.RANK):
        return _parse_int(contract.RANK, env[contract.RANK])
    match = _ORDINAL.search(env.get(contract.POD_NAME, ""))
    if match:
        return int(match.group(1))
    raise ConfigError(
        f"cannot tell this node's rank: set {contract.NODE_RANK_SETTING}, or run as an Indexed Job "
        f"({contract.JOB_COMPLETION_INDEX}), a StatefulSet ({contract.POD_NAME} ending in -N) or a PyTorchJob"
    )


def _string_list(env: Mapping[str, str], name: str, example: str = '["--num-cpus=4"]') -> tuple[str, ...]:
    text = env.get(name, "")
    if not text:
        return ()
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise ConfigError(f"{name}={text!r} is not JSON: use a list such as {example}") from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{name}={text!r} must be a JSON list of strings")
    return tuple(value)


def _outputs(env: Mapping[str, str]) -> streams.Streams:
    """The ranks' output choices from ``TRAINPLANE_REDIRECTS`` and its siblings (torchrun's forms)."""
    parsed: dict[str, object] = {}
    for name, key, parse in (
        (contract.REDIRECTS, "redirects", streams.parse_std), (contract.TEE, "tee", streams.parse_std),
        (contract.LOCAL_RANKS_FILTER, "local_ranks", streams.parse_ranks),
        (contract.STDOUT_FILTERS, "stdout_filters", streams.parse_filters),
        (contract.STDERR_FILTERS, "stderr_filters", streams.parse_filters),
    ):
        text = env.get(name, "")
        if not text:
            continue
        try:
            parsed[key] = parse(text)
        except ValueError as exc:
            raise ConfigError(f"{name}={text!r} is invalid: {exc}") from None
    return streams.Streams(**parsed)  # type: ignore[arg-type]


def _resolve(text: str) -> dict[str, str]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise ConfigError(f"{contract.RESOLVE}={text!r} is not JSON: use an object of host name to address") from None
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ConfigError(f"{contract.RESOLVE}={text!r} must map host names to addresses")
    return value


def _has_port(host: str) -> bool:
    return host.count(":") == 1


def _is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return addr == "localhost"
