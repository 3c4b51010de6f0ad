"""Local jobs: one agent process per node on loopback addresses, in batch or service mode.

The launcher (``python -m runtime launch``) and the workflow API (``runtime.workflow.LocalCompute``)
both start jobs with :func:`start`. Each node gets its own address (127.0.0.2, 127.0.0.3, ... where
the OS routes all of 127.0.0.0/8 to loopback, as Linux does; otherwise 127.0.0.1 with one port per
node) and runs the same agent a pod runs, configured through the same environment variables.
Standard library only.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import IO, Mapping, Optional, Sequence

from runtime.agent import contract
from runtime.agent.errors import ConfigError, RendezvousError, TransportError
from runtime.agent.execution.environment import reserved_ports
from runtime.agent.execution.procs import RUNTIME_ROOT, exit_status
from runtime.agent.net.transport import request_json
from runtime.agent.spec import environment
from runtime.agent.spec.job import SETTINGS, JobSpec
from runtime.agent.spec.settings import AgentSettings, NodeIdentity, Plumbing
from runtime.agent.spec.signals import DEFAULT_SIGNALS, STOP_SIGNALS, parse_signals
from runtime.agent.spec.signals import handled as handled_signals

AGENT_EXIT_GRACE = 10.0
"""Seconds the other agents get to finish once node 0's agent has exited, before they are killed."""
CONNECTION_FILE = "connection.json"
"""Service mode: the file in the job's log directory holding its URL and token (mode 0600)."""
RAY_OBJECT_STORE_SHARE = 0.3
"""Share of this machine's memory the local nodes' Ray object stores get together (Ray's own default
for one node), split evenly between them."""
RAY_MIN_OBJECT_STORE = 80 * 1024 * 1024
"""Smallest object store given to a local Ray node, bytes (Ray refuses less than 75 MiB)."""


@dataclass(frozen=True)
class LaunchPlan:
    """Where each node's agent listens.

    Attributes:
        addresses: one loopback address per node, by node id.
        ports: one agent port per node, by node id.
        master_port: rendezvous port on node 0.
    """

    addresses: tuple[str, ...]
    ports: tuple[int, ...]
    master_port: int


@dataclass(frozen=True)
class LocalJobSpec(JobSpec):
    """What to run locally: every job setting (``runtime.agent.spec.job.JobSpec``, with its one
    default and check each), and what only a job on this machine has.

    Attributes:
        pythonpath: directories put on every process's PYTHONPATH, first (service mode: where the
            called functions' modules live).
        env: further variables for every agent and so every process; not a job setting's (set the
            setting's field instead).
        forward_stdin: global rank 0 inherits the caller's stdin (the launcher's, as under torchrun);
            every other process reads EOF.

    Raises:
        SpecError: a job setting is invalid.
        ConfigError: ``env`` sets a job setting.
    """

    pythonpath: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    forward_stdin: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        by_env = {declared.env: name for name, declared in SETTINGS.items()}
        for key in self.env:
            if key in by_env:
                raise ConfigError(f"env={{{key!r}: ...}} is invalid: {key} is the job setting {by_env[key]}; set "
                                  f"LocalJobSpec's {by_env[key]} instead")


class LocalJob:
    """A running local job: its agent processes and how to reach its coordinator.

    Attributes:
        job: the job id.
        token: the job's bearer token.
        url: the coordinator's base URL, e.g. ``http://127.0.0.2:40123``.
        plan: where every agent listens.
        log_dir: the job's log directory.
        agents: the agent processes, by node id.
    """

    def __init__(self, job: str, token: str, plan: LaunchPlan, log_dir: str,
                 agents: Sequence[subprocess.Popen[bytes]], signals_to_handle: str = DEFAULT_SIGNALS) -> None:
        self.job = job
        self.signals = parse_signals(signals_to_handle)
        self.token = token
        self.plan = plan
        self.url = f"http://{plan.addresses[0]}:{plan.ports[0]}"
        self.log_dir = log_dir
        self.agents = list(agents)

    def wait_ready(self, timeout: float) -> None:
        """Wait until the coordinator reports a running world.

        Raises:
            RendezvousError: an agent exited first, or ``timeout`` seconds passed; names which.
        """
        deadline = time.monotonic() + timeout
        host, port = self.plan.addresses[0], self.plan.ports[0]
        while True:
            exited = [(i, exit_status(a.returncode)) for i, a in enumerate(self.agents) if a.poll() is not None]
            if exited:
                raise RendezvousError(f"job {self.job}: agent(s) exited before the job was ready "
                                      f"(node, exit code): {exited}; see their output above")
            try:
                info = request_json(host, port, "GET", contract.ROUTE_INFO, self.token, timeout=2.0)
            except TransportError:
                info = {}
            if info.get("status") == "running":
                return
            if time.monotonic() > deadline:
                raise RendezvousError(f"job {self.job}: not ready within {timeout:g} s "
                                      f"(coordinator status {info.get('status', 'unreachable')!r})")
            time.sleep(0.05)

    def write_connection_file(self) -> str:
        """Write ``{"url", "token", "job"}`` to ``<log_dir>/connection.json`` (mode 0600); return its path."""
        os.makedirs(self.log_dir, exist_ok=True)
        path = os.path.join(self.log_dir, CONNECTION_FILE)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"url": self.url, "token": self.token, "job": self.job}, f)
        return path

    def running(self) -> bool:
        """Whether any agent is still running."""
        return any(a.poll() is None for a in self.agents)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM every agent (each stops its processes), SIGKILL what is left after ``timeout`` seconds."""
        for agent in self.agents:
            if agent.poll() is None:
                agent.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for agent in self.agents:
            try:
                agent.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                agent.kill()
                agent.wait()
        shutil.rmtree(run_root(self.log_dir), ignore_errors=True)

    def supervise(self) -> int:
        """Wait for the agents, passing signals on; return the job's exit code.

        A stop signal (SIGTERM, SIGINT, and SIGHUP, SIGQUIT when handled) goes to every agent (as
        itself if ``signals_to_handle`` names it, else as SIGTERM), which stops its ranks with it. Any
        other signal ``signals_to_handle`` names (SIGUSR1, SIGUSR2) goes to every agent, which passes
        it on to its ranks, and the job goes on; SIGUSR1/SIGUSR2 not named are reported and ignored.

        The coordinator decides the verdict and every agent still in the job writes it to the
        verdict file, which gives the exit code; without one (agents killed), the first non-zero
        agent exit code counts. Once node 0's agent has exited, the others get ``AGENT_EXIT_GRACE``
        seconds before they are killed, so no agent outlives the caller.
        """
        received: list[int] = []

        def forward(signum: int, _frame: object) -> None:
            name = signal.Signals(signum).name
            if signum not in STOP_SIGNALS:
                named = signum in self.signals
                note = "passing it on to every rank" if named else "which --signals-to-handle does not name: ignored"
                os.write(2, f"[trainplane] received {name}, {note}\n".encode())  # os.write: print() is unsafe here
                if named:
                    self._signal_agents(signum)
                return
            if not received:
                os.write(2, f"[trainplane] received {name}: stopping every agent\n".encode())
            received.append(signum)
            self._signal_agents(signum if signum in self.signals else signal.SIGTERM)

        for sig in handled_signals(self.signals):
            signal.signal(sig, forward)
        coordinator = self.agents[0]
        deadline: Optional[float] = None
        while self.running():
            if deadline is None and coordinator.poll() is not None:
                deadline = time.monotonic() + AGENT_EXIT_GRACE
            if deadline is not None and time.monotonic() > deadline:
                for agent in self.agents:
                    if agent.poll() is None:
                        agent.kill()
            time.sleep(0.05)
        shutil.rmtree(run_root(self.log_dir), ignore_errors=True)
        if received:
            return contract.EXIT_INTERRUPTED_BASE + received[0]
        try:
            with open(verdict_path(self.log_dir)) as f:
                return int(json.load(f)["exit_code"])
        except (OSError, ValueError, KeyError):
            codes = [exit_status(a.returncode) for a in self.agents]
            return next((c for c in codes if c), 0)


    def _signal_agents(self, sig: int) -> None:
        for agent in self.agents:
            if agent.poll() is None:
                agent.send_signal(sig)


def free_port(host: str, avoid: Sequence[int] = ()) -> int:
    """A TCP port that is free on ``host`` now and not in ``avoid`` (chosen by the OS)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = sock.getsockname()[1]
        if port not in avoid:
            return port


def port_is_free(host: str, port: int) -> bool:
    """Whether a TCP port can be bound on ``host`` right now by a listener that sets ``SO_REUSEADDR``
    (as torch's TCPStore and the agent do), so a previous job's ``TIME_WAIT`` connections don't count."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def loopback_range_usable() -> bool:
    """Whether this host can bind 127.0.0.2 (Linux routes all of 127.0.0.0/8 to loopback)."""
    return port_is_free("127.0.0.2", 0)


def plan(workers: int, master_port: int, num_proc: int = 1) -> LaunchPlan:
    """Choose addresses and ports: distinct loopback addresses (127.0.0.2, 127.0.0.3, ...) when
    :func:`loopback_range_usable`, else 127.0.0.1 for every node with distinct agent ports.

    Args:
        workers: nodes.
        master_port: the job's base port (TCP); 0 picks one whose reserved range (rendezvous, JAX
            and TensorFlow ports, see ``contract.RENDEZVOUS_PORT_SPAN``) holds no agent's port.
        num_proc: processes per node, for the number of TensorFlow ports to keep clear.

    Raises:
        RuntimeError: ``master_port`` is taken on node 0's address.
    """
    if loopback_range_usable():
        addresses = tuple(f"127.0.0.{2 + i}" for i in range(workers))
        port = free_port("127.0.0.1")
        while not all(port_is_free(a, port) for a in addresses):
            port = free_port("127.0.0.1")
        ports = (port,) * workers
    else:
        addresses = ("127.0.0.1",) * workers
        chosen: list[int] = []
        for _ in range(workers):
            chosen.append(free_port("127.0.0.1", chosen))
        ports = tuple(chosen)
    if master_port == 0:
        reserved = reserved_ports(workers * num_proc)
        master_port = free_port(addresses[0])
        while any(master_port <= p < master_port + reserved for p in ports):
            master_port = free_port(addresses[0])
    elif not port_is_free(addresses[0], master_port):
        raise RuntimeError(f"--master-port: port {master_port} is in use on {addresses[0]}; pass another or 0")
    return LaunchPlan(addresses, ports, master_port)


def agent_env(spec: LocalJobSpec, lp: LaunchPlan, node_id: int, job: str, token: str, log_dir: str) -> dict[str, str]:
    """The environment of node ``node_id``'s agent: the variables a pod's agent reads, written by the
    same writer (``runtime.agent.spec.environment``), over this process's environment and ``spec.env``."""
    daemon_args = (*ray_defaults(spec.workers), *spec.daemon_args) if spec.distribution == "ray" else ()
    node_spec = replace(spec, job_name=job, master_port=lp.master_port, daemon_args=daemon_args,
                        log_dir=os.path.join(log_dir, f"node-{node_id}"))
    settings = AgentSettings(
        node_spec,
        NodeIdentity(node_id, lp.addresses[0], lp.ports[0], lp.ports[node_id], lp.addresses[node_id],
                     lp.addresses[node_id]),
        Plumbing(token, die_with_parent=True, verdict_file=verdict_path(log_dir), run_root=run_root(log_dir),
                 forward_stdin=spec.forward_stdin and node_id == 0),
    )
    env = {**os.environ, **spec.env, **environment.agent_env(settings)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (*spec.pythonpath, RUNTIME_ROOT, env.get("PYTHONPATH", "")) if p)
    return env


def ray_defaults(workers: int) -> tuple[str, ...]:
    """``ray start`` arguments for ``workers`` local nodes sharing this machine: each gets its share
    of the CPUs and of the object store memory Ray would give one node on it (``RAY_OBJECT_STORE_SHARE``)."""
    args = [f"--num-cpus={max(1, (os.cpu_count() or 1) // workers)}"]
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return tuple(args)
    args.append(f"--object-store-memory={max(RAY_MIN_OBJECT_STORE, int(memory * RAY_OBJECT_STORE_SHARE) // workers)}")
    return tuple(args)


def run_root(log_dir: str) -> str:
    """Where the agents keep their run directories; the launcher removes it when the job is over,
    including what an agent killed by SIGKILL left behind."""
    return os.path.join(log_dir, "run")


def verdict_path(log_dir: str) -> str:
    """Where the agents write the job's final verdict (JSON: status, exit_code, message)."""
    return os.path.join(log_dir, "verdict.json")


def start(spec: LocalJobSpec, stdout: Optional[IO[bytes]] = None, stderr: Optional[IO[bytes]] = None) -> LocalJob:
    """Start one agent process per node and return at once (see :meth:`LocalJob.wait_ready`).

    Args:
        spec: what to run.
        stdout: where the agents (and their ranks) write output; default: inherited.
        stderr: likewise for errors.

    Raises:
        RuntimeError: ``spec.master_port`` is taken.
        OSError: an agent process could not be started.
    """
    lp = plan(spec.workers, spec.master_port, spec.num_proc)
    job = spec.job_name or f"local-{uuid.uuid4().hex[:8]}"
    token = secrets.token_urlsafe(32)
    log_dir = spec.log_dir or os.path.join(tempfile.gettempdir(), "trainplane", job)
    os.makedirs(log_dir, exist_ok=True)
    agents = [
        subprocess.Popen([sys.executable, "-m", contract.AGENT_MODULE], env=agent_env(spec, lp, i, job, token, log_dir),
                         stdin=None if spec.forward_stdin and i == 0 else subprocess.DEVNULL,
                         stdout=stdout, stderr=stderr)
        for i in range(spec.workers)
    ]
    return LocalJob(job, token, lp, log_dir, agents, spec.signals_to_handle)
