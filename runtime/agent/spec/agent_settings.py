"""Agent settings: the job spec, this node's identity and the local plumbing, each validated, read from
the environment at the entrypoint only. Standard library only.

In pods every setting comes from variables named in ``contract.py`` (written by the ``DistributedJob``
component through ``spec.env_writer``); the local launcher writes the same variables for its agent
processes with the same writer, so both paths exercise one contract.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass, field, fields
from typing import Any, Mapping, Optional, Sequence

from runtime.agent import contract
from runtime.agent.errors import ConfigError, ParseError, SpecError
from runtime.agent.spec.address import HOST_PORT_FIX, split_host_port
from runtime.agent.spec.job import SETTINGS, JobSpec
from runtime.agent.spec.ports import known_port
from runtime.agent.spec.setting import BOOL, INT, STRINGS, Check, Codec, tcp_port, whole
from runtime.agent.spec.setting import text as non_empty
from runtime.agent.spec.trainer import check_trainer_env

_ORDINAL = re.compile(r"-(\d+)$")


@dataclass(frozen=True)
class NodeIdentity:
    """Which node this agent is and where it and the coordinator listen.

    Attributes:
        node_id: this node's stable index, ``0 <= node_id < max_nodes``; node 0 coordinates first.
        coordinator: host name or address of node 0's agent.
        coordinator_port: node 0's agent port (TCP).
        agent_port: this agent's HTTP port (TCP).
        advertise_address: the address peers reach this node at.
        bind_address: the address the HTTP server binds; ``""`` for all interfaces.
        peers: where every node index's agent is, ``host`` or ``host:port`` (this agent's port when
            none), by node id; one entry holding ``{index}`` stands for every index (a pod's name
            under the headless Service, ``<job>-{index}.<service>``). A node that starts when the job
            already runs (a replaced pod, node 0's included) finds the current coordinator through
            them. Empty: only ``coordinator`` is asked.
    """

    node_id: int
    coordinator: str
    coordinator_port: int = contract.AGENT_PORT
    agent_port: int = contract.AGENT_PORT
    advertise_address: str = "127.0.0.1"
    bind_address: str = ""
    peers: tuple[str, ...] = ()

    @property
    def is_coordinator(self) -> bool:
        """Node 0 coordinates (until it fails over)."""
        return self.node_id == 0


def node_rank_in(nodes: int) -> Check:
    """The check of a node rank in a job of ``nodes`` nodes (at most): 0 to ``nodes - 1``; the agent's
    ``TRAINPLANE_NODE_RANK`` and a per-node command line's ``--node-rank`` (``runtime.local.hosts``)."""
    return whole(0, f"use a node rank from 0 to {nodes - 1}", nodes - 1)


@dataclass(frozen=True)
class Plumbing:
    """How this agent is wired to its launcher and machine; none of it describes the job.

    Attributes:
        token: the job's bearer token; every route but ``/healthz`` requires it.
        resolve: host name to address overrides consulted before DNS (tests, local mode).
        die_with_parent: exit when the parent process (the local launcher) dies.
        verdict_file: local mode: where the agent writes the job's final verdict as JSON.
        run_root: directory in which the agent makes its private run directory (the world files its
            processes read); ``None`` for the system's temporary directory. A launcher that owns one
            removes what an agent killed by SIGKILL could not.
        daemon_prefix: command put before every framework daemon's (a wrapper, or a test's stand-in).
        forward_stdin: local mode: global rank 0 inherits this agent's stdin (the launcher's), as under
            torchrun, so ``breakpoint()`` works there; every other process reads EOF.
        console_file: local mode: the state file of the console (the launcher's terminal) this
            agent shares with the job's other agents, so their ranks' lines never merge
            (``runtime.agent.execution.console``); ``None``: a console of its own (a pod's log).
    """

    token: str
    resolve: Mapping[str, str] = field(default_factory=dict)
    die_with_parent: bool = False
    verdict_file: Optional[str] = None
    run_root: Optional[str] = None
    daemon_prefix: tuple[str, ...] = ()
    forward_stdin: bool = False
    console_file: Optional[str] = None


@dataclass(frozen=True)
class AgentSettings:
    """Everything one agent needs: the job, this node, the plumbing. Validated on construction.

    Raises:
        ConfigError: naming the environment variable of the first invalid setting, its value and the fix.
    """

    spec: JobSpec
    node: NodeIdentity
    plumbing: Plumbing

    def __post_init__(self) -> None:
        spec, node = self.spec, self.node
        _check(contract.JOB_NAME, spec.job_name or "", SETTINGS["job_name"].problem)  # the spec's check; unset is ""
        _check(contract.TOKEN, self.plumbing.token, non_empty("set the job's bearer token"))
        _check(contract.NODE_RANK_SETTING, node.node_id, node_rank_in(spec.max_nodes))
        _check(contract.MASTER_PORT, spec.master_port, known_port)
        for name, port in ((contract.AGENT_PORT_SETTING, node.agent_port), (contract.COORDINATOR_HOST,
                                                                             node.coordinator_port)):
            _check(name, port, tcp_port())
        if spec.outputs.writes_files and not spec.log_dir:
            raise _invalid(contract.REDIRECTS, spec.redirects.encode(),
                           f"writes the ranks' streams to files (redirected, teed or filtered), and "
                           f"{contract.LOG_DIR} is unset",
                           f"set {contract.LOG_DIR}: redirected and teed streams are written to files there")

    @property
    def token(self) -> str:
        """The job's bearer token."""
        return self.plumbing.token

    @property
    def job(self) -> str:
        """The job id (``JobSpec.job_name``, never empty here), which every message between agents names."""
        return self.spec.job_name or ""

    @property
    def local_world_size(self) -> int:
        """User processes (ranks) this node runs (``JobSpec.local_world_size``)."""
        return self.spec.local_world_size(self.node.node_id)

    @classmethod
    def from_env(cls, env: Mapping[str, str], argv: Sequence[str] = ()) -> AgentSettings:
        """Read settings from the environment variables named in ``contract.py``; ``argv`` (the agent's own
        command-line arguments, e.g. a TrainJob's ``trainer.args``), when given, is the entrypoint instead of
        ``TRAINPLANE_ENTRYPOINT``.

        Node id: ``TRAINPLANE_NODE_RANK``, else ``JOB_COMPLETION_INDEX`` (Indexed Job), else ``RANK``
        (set by the Kubeflow training operator on PyTorchJob replicas: Master 0, Worker i+1; read
        before the pod name, since ``<job>-worker-0`` ends in 0), else the ordinal suffix of
        ``POD_NAME`` (StatefulSet). Coordinator: ``TRAINPLANE_COORDINATOR`` (``host`` or
        ``host:port``, an IPv6 address bare or as ``[fd00::2]:40000``), else the operator's ``MASTER_ADDR``.

        In a Kubeflow Trainer pod (``TRAINPLANE_TRAINJOB``) the Trainer's ``PET_*`` must agree with these
        settings (``runtime.agent.spec.trainer``).

        Raises:
            ConfigError: a variable is missing or malformed, a setting is invalid, both ``argv`` and
                ``TRAINPLANE_ENTRYPOINT`` name an entrypoint, or a ``PET_*`` disagrees; the message names the
                variables.
        """
        settings = cls(spec_from_env(env, argv), identity_from_env(env), plumbing_from_env(env))
        check_trainer_env(env, settings.spec, settings.node)
        return settings


def spec_from_env(env: Mapping[str, str], argv: Sequence[str] = ()) -> JobSpec:
    """The job spec the environment describes: every setting's variable, else its default; ``argv``, when
    given, is the entrypoint.

    Raises:
        ConfigError: a variable cannot be read, a setting is invalid, or ``argv`` and
            ``TRAINPLANE_ENTRYPOINT`` both name an entrypoint; names the variable.
    """
    values: dict[str, Any] = {}
    if argv:
        if env.get(contract.ENTRYPOINT, "").strip():
            raise ConfigError(f"{contract.ENTRYPOINT}={env[contract.ENTRYPOINT]!r} and the agent's arguments "
                              f"{list(argv)!r} both name an entrypoint: give it in one place")
        values["entrypoint"] = tuple(argv)
    for f in fields(JobSpec):
        declared = SETTINGS[f.name]
        text = env.get(declared.env, "")
        if not text.strip() or f.name in values:
            continue
        values[f.name] = _parsed(declared.env, text, declared.codec)
    if "master_port" in values:  # every node must know it: known_port before the spec's check, which takes 0
        _check(contract.MASTER_PORT, values["master_port"], known_port)
    try:
        return JobSpec(**values)
    except SpecError as exc:
        problem, fix = exc.render(lambda name: SETTINGS[name].env if name in SETTINGS else name)
        raise _invalid(SETTINGS[exc.field].env, exc.value, problem, fix) from None


def identity_from_env(env: Mapping[str, str]) -> NodeIdentity:
    """This node's identity from the environment (see :meth:`AgentSettings.from_env`).

    Raises:
        ConfigError: the node id or the coordinator cannot be told; names the variables to set.
    """
    coordinator = env.get(contract.COORDINATOR_HOST) or env.get(contract.MASTER_ADDR, "")
    if not coordinator:
        raise ConfigError(f"{contract.COORDINATOR_HOST} is unset, and so is {contract.MASTER_ADDR}; set it to node 0's "
                          "host name (e.g. <job>-0.<service>)")
    agent_port = _int(env, contract.AGENT_PORT_SETTING, contract.AGENT_PORT)
    try:
        host, port = split_host_port(coordinator)
    except ValueError as exc:
        raise ConfigError(f"{contract.COORDINATOR_HOST}={coordinator!r} is invalid: {exc}; {HOST_PORT_FIX}") from None
    advertise = env.get(contract.ADVERTISE_ADDRESS) or env.get(contract.POD_IP, "") or "127.0.0.1"
    bind = env.get(contract.BIND_ADDRESS)
    if bind is None:
        bind = advertise if _is_loopback(advertise) else ""
    return NodeIdentity(
        node_id=_node_id(env), coordinator=host,
        coordinator_port=agent_port if port is None else port,
        agent_port=agent_port, advertise_address=advertise, bind_address=bind,
        peers=tuple(p.strip() for p in env.get(contract.PEERS, "").split(",") if p.strip()),
    )


def plumbing_from_env(env: Mapping[str, str]) -> Plumbing:
    """The agent's plumbing from the environment.

    Raises:
        ConfigError: a variable is malformed; names it.
    """
    return Plumbing(
        token=env.get(contract.TOKEN, ""),
        resolve=_resolve(env.get(contract.RESOLVE, "")),
        die_with_parent=_flag(env, contract.DIE_WITH_PARENT),
        verdict_file=env.get(contract.VERDICT_FILE) or None,
        run_root=env.get(contract.RUN_ROOT) or None,
        daemon_prefix=_strings(env, contract.DAEMON_PREFIX),
        forward_stdin=_flag(env, contract.FORWARD_STDIN),
        console_file=env.get(contract.CONSOLE_FILE) or None,
    )


def _invalid(name: str, value: object, problem: str, fix: str) -> ConfigError:
    """The agent's one wording of a refused setting (its exit 2): ``NAME=value is invalid: problem; fix``, the
    words of a ``(problem, fix)`` check (``spec.setting.Check``) or a job spec rule as ``errors.SpecError``
    says them, with the environment variable for the setting. A flag's value is spelled as the variable takes
    it (``true``, not Python's ``True``)."""
    shown = str(value).lower() if isinstance(value, bool) else repr(value)
    return ConfigError(f"{name}={shown} is invalid: {problem}; {fix}")


def _check(name: str, value: object, check: Check) -> None:
    """Raise ``check``'s answer for the value of variable ``name`` as :func:`_invalid` words it."""
    found = check(value)
    if found is not None:
        raise _invalid(name, value, *found)


def _parsed(name: str, text: str, codec: Codec) -> Any:
    """``text`` of variable ``name`` read by ``codec``, or the :class:`ConfigError` naming both."""
    try:
        return codec.parse(text)
    except ParseError as exc:
        raise _invalid(name, text, exc.problem, exc.fix) from None


def _parse_int(name: str, text: str) -> int:
    return int(_parsed(name, text, INT))


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name)
    return default if text in (None, "") else _parse_int(name, text)


def _flag(env: Mapping[str, str], name: str) -> bool:
    text = env.get(name, "").strip().lower()
    return bool(text) and bool(_parsed(name, text, BOOL))


def _strings(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    text = env.get(name, "")
    if not text:
        return ()
    return tuple(_parsed(name, text, STRINGS))


def _node_id(env: Mapping[str, str]) -> int:
    for name in (contract.NODE_RANK_SETTING, contract.JOB_COMPLETION_INDEX, contract.RANK):
        if env.get(name):
            return _parse_int(name, env[name])
    match = _ORDINAL.search(env.get(contract.POD_NAME, ""))
    if match:
        return int(match.group(1))
    raise ConfigError(
        f"cannot tell this node's rank: set {contract.NODE_RANK_SETTING}, or run as an Indexed Job "
        f"({contract.JOB_COMPLETION_INDEX}), a StatefulSet ({contract.POD_NAME} ending in -N) or a PyTorchJob"
    )


def _resolve(text: str) -> dict[str, str]:
    if not text:
        return {}
    fix = 'use an object of host name to address, e.g. {"node-0": "10.0.0.5"}'
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise _invalid(contract.RESOLVE, text, "is not JSON", fix) from None
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise _invalid(contract.RESOLVE, text, "must map host names to addresses", fix)
    return value


def _is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return addr == "localhost"
