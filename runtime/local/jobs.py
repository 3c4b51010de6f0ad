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
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, Mapping, Optional, Sequence

from runtime.agent import contract
from runtime.agent.errors import ConfigError, RendezvousError, TransportError
from runtime.agent.spec import env_writer
from runtime.agent.spec.address import url
from runtime.agent.spec.agent_settings import AgentSettings, NodeIdentity, Plumbing
from runtime.agent.spec.job import SETTINGS, JobSpec
from runtime.agent.spec.signals import DEFAULT_SIGNALS, STOP_SIGNALS, exit_status, parse_signals
from runtime.agent.spec.signals import handled as handled_signals
from runtime.agent.spec.status import RUNNING
from runtime.local import logdirs
from runtime.local.exits import ExitWatch
from runtime.local.launch_plan import LaunchPlan, free_port, plan, port_is_free
from runtime.local.outcome import Outcome
from runtime.local.ray_defaults import ray_defaults

AGENT_EXIT_GRACE = 10.0
"""Seconds a fixed-size job's other agents get once node 0's agent has exited, before they are killed
(an elastic job's go on: the lowest survivor takes over as coordinator)."""
KILLED_LOOK = 0.05
"""Seconds at least between the supervisor's looks once the grace is over and it kills what is left (an
agent that does not die at once is not spun on)."""
SUPERVISE_LOOK = 1.0
"""Seconds at most between the supervisor's looks at its agents while none exits (it then watches the
agents a resize added); an exit wakes it at once."""
CONSOLE_STATE = "console"
"""The file in the run root through which a job's agents share the launcher's console."""
CONNECTION_FILE = "connection.json"
"""Service mode: the file in the job's log directory holding its URL and token (mode 0600)."""
RUNTIME_ROOT = str(Path(__file__).resolve().parents[2])
"""The directory holding this ``runtime`` package, which local agents run from."""


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
        elastic: whether the job continues without a node, node 0 included.
    """

    def __init__(self, *, job: str, token: str, plan: LaunchPlan, log_dir: str,
                 agents: Sequence[subprocess.Popen[bytes]], signals_to_handle: str = DEFAULT_SIGNALS,
                 log_hold: Optional[int] = None, elastic: bool = False) -> None:
        self.job = job
        self.signals = parse_signals(signals_to_handle)
        self.token = token
        self.plan = plan
        self.url = url(plan.addresses[0], plan.ports[0])
        self.log_dir = log_dir
        self.agents = list(agents)
        self._log_hold = log_hold
        self.elastic = elastic
        self.new_session = False
        """Whether the agents run in a session of their own (:func:`start`'s ``new_session``)."""

    def wait_ready(self, timeout: float) -> None:
        """Wait until the coordinator reports a running world.

        Raises:
            RendezvousError: an agent exited first, or ``timeout`` seconds passed; names which.
        """
        from runtime.local.json_http import request_json  # http.client: a batch job's launcher never asks

        deadline = time.monotonic() + timeout
        host, port = self.plan.addresses[0], self.plan.ports[0]
        while True:
            exited = [(i, exit_status(a.returncode)) for i, a in enumerate(self.agents) if a.poll() is not None]
            if exited:
                raise RendezvousError(f"job {self.job}: agent(s) exited before the job was ready "
                                      f"(node, exit code): {exited}; see their output above")
            try:
                info = request_json(host, port, "GET", contract.ROUTE_INFO, self.token, timeout=2.0,
                                    job=self.job)
            except TransportError:
                info = {}
            if info.get("status") == RUNNING:
                return
            if time.monotonic() > deadline:
                raise RendezvousError(f"job {self.job}: not ready within {timeout:g} s "
                                      f"(coordinator status {info.get('status', 'unreachable')!r})")
            time.sleep(0.05)

    def scale(self, spec: LocalJobSpec, workers: int, output: Optional[IO[bytes]] = None, grace: float = 10.0) -> None:
        """Run ``workers`` agents, as a StatefulSet scales: new ones with the next node ids (each joins
        the running world, if ``spec`` is elastic), and the highest ones stopped (SIGTERM; SIGKILL
        after ``grace`` seconds). Returns once the agents are started or gone, not when the world has
        changed (the coordinator's ``/members`` says when).

        Args:
            spec: the spec the job was started with.
            workers: agents wanted.
            output: where new agents write their output (default: inherited).
            grace: seconds a stopped agent gets before SIGKILL.
        """
        while len(self.agents) > workers:
            agent = self.agents.pop()
            agent.send_signal(signal.SIGTERM)
            try:
                agent.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                agent.kill()
                agent.wait()
        while len(self.agents) < workers:
            node_id = len(self.agents)
            first = self.plan
            if first.addresses[0] != "127.0.0.1":  # a loopback address per node (plan)
                address = f"127.0.0.{2 + node_id}"
                port = first.ports[0] if port_is_free(address, first.ports[0]) else free_port(address)
            else:
                address, port = first.addresses[0], free_port(first.addresses[0], first.ports)
            self.plan = LaunchPlan((*first.addresses, address), (*first.ports, port), first.master_port)
            env = agent_env(spec, self.plan, node_id, self.job, self.token, self.log_dir)
            self.agents.append(subprocess.Popen(agent_command(), env=env,
                                                stdin=subprocess.DEVNULL, stdout=output, stderr=output,
                                                start_new_session=self.new_session))

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
        self._over()

    def _over(self) -> None:
        """Every agent has exited: remove the run directories, release the job's ports, and let its
        log directory be pruned (``runtime.local.logdirs``)."""
        shutil.rmtree(run_root(self.log_dir), ignore_errors=True)
        if self.plan.reservation is not None:
            self.plan.reservation.release()
        if self._log_hold is not None:
            os.close(self._log_hold)
            self._log_hold = None

    def supervise(self) -> Outcome:
        """Wait for the agents, passing signals on; return how the job ended (its exit code, whose).

        A stop signal (SIGTERM, SIGINT, and SIGHUP, SIGQUIT when handled) goes to every agent (as
        itself if ``signals_to_handle`` names it, else as SIGTERM), which stops its ranks with it. Any
        other signal ``signals_to_handle`` names (SIGUSR1, SIGUSR2) goes to every agent, which passes
        it on to its ranks, and the job goes on; SIGUSR1/SIGUSR2 not named are reported and ignored.

        The coordinator decides the verdict and every agent still in the job writes it to the
        verdict file, which gives the exit code and its root cause; without one (agents killed,
        the world never formed), the first non-zero agent exit code counts (:meth:`Outcome.of`).
        Once node 0's agent has exited, a fixed-size job's others get ``AGENT_EXIT_GRACE`` seconds
        before they are killed; an elastic job's go on. No agent outlives the caller (each dies with it).
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
        exits = ExitWatch()
        while True:
            for agent in self.agents:
                exits.watch(agent)
            if not self.running():
                break
            if deadline is None and not self.elastic and coordinator.poll() is not None:
                deadline = time.monotonic() + AGENT_EXIT_GRACE
            if deadline is not None and time.monotonic() > deadline:
                for agent in self.agents:
                    if agent.poll() is None:
                        agent.kill()
            look = SUPERVISE_LOOK if deadline is None else min(SUPERVISE_LOOK, deadline - time.monotonic())
            exits.wait(max(KILLED_LOOK, look))
        self._over()
        try:
            with open(verdict_path(self.log_dir)) as f:
                verdict: Optional[dict[str, Any]] = json.load(f)
        except (OSError, ValueError):
            verdict = None
        return Outcome.of(verdict, [exit_status(a.returncode) for a in self.agents], received[0] if received else None)


    def _signal_agents(self, sig: int) -> None:
        for agent in self.agents:
            if agent.poll() is None:
                agent.send_signal(sig)


def agent_env(spec: LocalJobSpec, lp: LaunchPlan, node_id: int, job: str, token: str, log_dir: str) -> dict[str, str]:
    """The environment of node ``node_id``'s agent: the variables a pod's agent reads, written by the
    same writer (``runtime.agent.spec.env_writer``), over this process's environment and ``spec.env``."""
    identity = NodeIdentity(node_id=node_id, coordinator=lp.addresses[0], coordinator_port=lp.ports[0],
                            agent_port=lp.ports[node_id], advertise_address=lp.addresses[node_id],
                            bind_address=lp.addresses[node_id])
    return node_env(spec, identity, job, token, log_dir, lp.master_port)


def node_env(spec: LocalJobSpec, identity: NodeIdentity, job: str, token: str, log_dir: str,
             master_port: int) -> dict[str, str]:
    """The environment of the agent of node ``identity`` (:func:`agent_env`; ``runtime.local.hosts``: the
    one node of a job's host that this launcher runs), its logs under ``log_dir/node-<id>``."""
    node_id = identity.node_id
    daemon_args = (*ray_defaults(spec.workers), *spec.daemon_args) if spec.distribution == "ray" else ()
    node_spec = replace(spec, job_name=job, master_port=master_port, daemon_args=daemon_args,
                        log_dir=os.path.join(log_dir, f"node-{node_id}"))
    settings = AgentSettings(
        node_spec, identity,
        Plumbing(token, die_with_parent=True, verdict_file=verdict_path(log_dir), run_root=run_root(log_dir),
                 forward_stdin=spec.forward_stdin and node_id == 0,
                 console_file=os.path.join(run_root(log_dir), CONSOLE_STATE)),
    )
    env = {**os.environ, **spec.env, **env_writer.agent_env(settings),
           contract.PARENT_PID: str(os.getpid())}  # this launcher, the agent's parent, whose death it follows
    if spec.pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (*spec.pythonpath, env.get("PYTHONPATH", "")) if p)
    return env


def agent_command() -> list[str]:
    """How a local agent is started: ``python -m runtime.agent`` with this ``runtime`` importable
    (its directory first on the agent's own ``sys.path``, not on the PYTHONPATH its ranks inherit)."""
    return [sys.executable, "-c", f"import sys; sys.path.insert(0, {RUNTIME_ROOT!r}); import runpy; "
                                  f"runpy.run_module({contract.AGENT_MODULE!r}, run_name='__main__', alter_sys=True)"]


def run_root(log_dir: str) -> str:
    """Where the agents keep their run directories; the launcher removes it when the job is over,
    including what an agent killed by SIGKILL left behind."""
    return os.path.join(log_dir, "run")


def verdict_path(log_dir: str) -> str:
    """Where the agents write the job's final verdict (JSON: status, exit_code, message)."""
    return os.path.join(log_dir, "verdict.json")


def start(spec: LocalJobSpec, stdout: Optional[IO[bytes]] = None, stderr: Optional[IO[bytes]] = None,
          new_session: bool = False) -> LocalJob:
    """Start one agent process per node and return at once (see :meth:`LocalJob.wait_ready`).

    Args:
        spec: what to run.
        stdout: where the agents (and their ranks) write output; default: inherited.
        stderr: likewise for errors.
        new_session: start the agents in a session of their own, so the signals a terminal sends its
            foreground process group (Ctrl-C) reach the caller only: a driver's ``LocalCompute`` (the
            caller cancels its call; the job stays for the next). They still die with the caller.

    Raises:
        RuntimeError: ``spec.master_port`` is taken, the default log directory is not this user's, or
            a job of the same name is running in it.
        OSError: an agent process could not be started.
    """
    lp = plan(spec.workers, spec.master_port, spec.num_proc)
    job = spec.job_name or f"local-{uuid.uuid4().hex[:8]}"
    token = secrets.token_urlsafe(32)
    base = None if spec.log_dir else logdirs.default_base()
    log_dir = spec.log_dir or os.path.join(base or "", job)
    os.makedirs(log_dir, exist_ok=True)
    log_hold = logdirs.hold(log_dir)
    if base is not None:
        logdirs.prune(base)
    agents: list[subprocess.Popen[bytes]] = []
    try:
        for i in range(spec.workers):
            agents.append(subprocess.Popen(
                agent_command(), env=agent_env(spec, lp, i, job, token, log_dir),
                stdin=None if spec.forward_stdin and i == 0 else subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                start_new_session=new_session))
    except OSError:
        LocalJob(job=job, token=token, plan=lp, log_dir=log_dir, agents=agents, log_hold=log_hold).stop()
        raise
    started = LocalJob(job=job, token=token, plan=lp, log_dir=log_dir, agents=agents,
                       signals_to_handle=spec.signals_to_handle, log_hold=log_hold, elastic=spec.elastic)
    started.new_session = new_session
    return started
