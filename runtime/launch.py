"""Local mode: ``python -m runtime launch`` runs one agent process per node on loopback addresses.

Each node gets its own address (127.0.0.2, 127.0.0.3, ... where the OS routes all of 127.0.0.0/8 to
loopback, as Linux does; otherwise 127.0.0.1 with one port per node) and runs the same agent a pod
runs, configured through the same environment variables. The launcher's exit code is the job's.
Flag names follow torchrun where they overlap (``--nnodes``, ``--nproc-per-node``, ``--max-restarts``,
``--master-port``, ``--log-dir``). Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn, Optional, Sequence

from runtime.agent import contract
from runtime.agent.procs import RUNTIME_ROOT, exit_status
from runtime.agent.transport import port_is_free
from runtime.agent.world import DISTRIBUTIONS

AGENT_EXIT_GRACE = 10.0
"""Seconds the other agents get to finish once node 0's agent has exited, before they are killed."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``prog: error: ...``) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(contract.EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``launch`` command line."""
    p = _Parser(prog="python -m runtime launch", description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", "--nnodes", dest="workers", type=int, default=1, help="nodes (agents); default 1")
    p.add_argument("--num-proc", "--nproc-per-node", dest="num_proc", type=int, default=1,
                   help="processes per node; default 1")
    p.add_argument("--distribution", choices=DISTRIBUTIONS, default="spmd",
                   help="which framework's variables to set; spmd sets all (default)")
    p.add_argument("--quorum-workers", type=int, default=None, help="nodes needed to start; default all")
    p.add_argument("--quorum-timeout", type=float, default=60.0, help="seconds to wait for quorum; default 60")
    p.add_argument("--max-restarts", type=int, default=0, help="restarts of the whole job after a failure")
    p.add_argument("--master-port", type=int, default=contract.DEFAULT_MASTER_PORT,
                   help=f"rendezvous port on node 0; default {contract.DEFAULT_MASTER_PORT}, 0 picks a free one")
    p.add_argument("--log-dir", default=None, help="directory for per-rank logs; default a temporary directory")
    p.add_argument("--job-name", default=None, help="job id (TORCHELASTIC_RUN_ID); default local-<random>")
    p.add_argument("--grace-period", type=float, default=5.0, help="seconds between SIGTERM and SIGKILL")
    p.add_argument("-m", "--module", action="store_true", help="run SCRIPT as a module, like python -m")
    p.add_argument("script", metavar="SCRIPT", help="the training script (or module with -m)")
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="arguments for the script")
    return p


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


def validate(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> None:
    """Check flag values; calls ``parser.error`` (exit 2) naming the flag and the fix."""
    checks = (
        (ns.workers >= 1, f"--workers: must be 1 or more (got {ns.workers})"),
        (ns.num_proc >= 1, f"--num-proc: must be 1 or more (got {ns.num_proc})"),
        (ns.quorum_workers is None or 1 <= ns.quorum_workers <= ns.workers,
         f"--quorum-workers: must be from 1 to --workers ({ns.workers}) (got {ns.quorum_workers})"),
        (ns.quorum_timeout > 0, f"--quorum-timeout: must be a positive number of seconds (got {ns.quorum_timeout})"),
        (ns.max_restarts >= 0, f"--max-restarts: must be 0 or more (got {ns.max_restarts})"),
        (0 <= ns.master_port <= 65535, f"--master-port: must be from 1 to 65535, or 0 for any (got {ns.master_port})"),
        (ns.grace_period >= 0, f"--grace-period: must be 0 or more seconds (got {ns.grace_period})"),
        (ns.module or Path(ns.script).is_file(), f"SCRIPT: no such file {ns.script!r} (use -m for a module)"),
    )
    for ok, message in checks:
        if not ok:
            parser.error(message)


def free_port(host: str, avoid: Sequence[int] = ()) -> int:
    """A TCP port that is free on ``host`` now and not in ``avoid`` (chosen by the OS)."""
    import socket

    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = sock.getsockname()[1]
        if port not in avoid:
            return port


def plan(workers: int, master_port: int) -> LaunchPlan:
    """Choose addresses and ports: distinct loopback addresses when the OS allows, else distinct ports.

    Raises:
        RuntimeError: ``master_port`` is taken on node 0's address.
    """
    if port_is_free("127.0.0.2", 0):
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
        master_port = free_port(addresses[0], ports)
    elif not port_is_free(addresses[0], master_port):
        raise RuntimeError(f"--master-port: port {master_port} is in use on {addresses[0]}; pass another or 0")
    return LaunchPlan(addresses, ports, master_port)


def agent_env(
    ns: argparse.Namespace, lp: LaunchPlan, node_id: int, job: str, token: str, log_dir: str
) -> dict[str, str]:
    """The environment of node ``node_id``'s agent: the same variables a pod's agent reads."""
    entrypoint = (["-m", ns.script] if ns.module else [ns.script]) + list(ns.args)
    env = dict(os.environ)
    env.update({
        contract.JOB_NAME: job,
        contract.TOKEN: token,
        contract.NODE_RANK_SETTING: str(node_id),
        contract.WORKERS: str(ns.workers),
        contract.NUM_PROC: str(ns.num_proc),
        contract.ENTRYPOINT: json.dumps(entrypoint),
        contract.COORDINATOR_HOST: f"{lp.addresses[0]}:{lp.ports[0]}",
        contract.AGENT_PORT_SETTING: str(lp.ports[node_id]),
        contract.ADVERTISE_ADDRESS: lp.addresses[node_id],
        contract.BIND_ADDRESS: lp.addresses[node_id],
        contract.MASTER_PORT: str(lp.master_port),
        contract.QUORUM_TIMEOUT: str(ns.quorum_timeout),
        contract.MAX_RESTARTS: str(ns.max_restarts),
        contract.DISTRIBUTION: ns.distribution,
        contract.MODE: "batch",
        contract.LOG_DIR: os.path.join(log_dir, f"node-{node_id}"),
        contract.GRACE_PERIOD: str(ns.grace_period),
        contract.DIE_WITH_PARENT: "true",
        "PYTHONPATH": os.pathsep.join(p for p in (RUNTIME_ROOT, os.environ.get("PYTHONPATH", "")) if p),
    })
    if ns.quorum_workers is not None:
        env[contract.QUORUM_WORKERS] = str(ns.quorum_workers)
    return env


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run a job locally; return its exit code (the failing rank's code, or 0)."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    validate(parser, ns)
    try:
        lp = plan(ns.workers, ns.master_port)
    except RuntimeError as exc:
        parser.error(str(exc))
    job = ns.job_name or f"local-{uuid.uuid4().hex[:8]}"
    token = secrets.token_urlsafe(32)
    log_dir = ns.log_dir or os.path.join(tempfile.gettempdir(), "trainplane", job)
    print(f"[trainplane] job {job}: {ns.workers} node(s) x {ns.num_proc} process(es) on "
          f"{', '.join(sorted(set(lp.addresses)))}; logs in {log_dir}", file=sys.stderr, flush=True)
    agents = [
        subprocess.Popen([sys.executable, "-m", contract.AGENT_MODULE],
                         env=agent_env(ns, lp, i, job, token, log_dir), stdin=subprocess.DEVNULL)
        for i in range(ns.workers)
    ]
    return supervise(agents)


def supervise(agents: Sequence[subprocess.Popen[bytes]]) -> int:
    """Wait for the agents, forwarding SIGINT/SIGTERM; return the job's exit code.

    Node 0's agent decides the verdict; once it has exited, the others get ``AGENT_EXIT_GRACE``
    seconds before they are killed, so no agent outlives the launcher.
    """
    received: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        received.append(signum)
        for agent in agents:
            if agent.poll() is None:
                agent.send_signal(signal.SIGTERM)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, forward)
    coordinator = agents[0]
    deadline: Optional[float] = None
    while any(a.poll() is None for a in agents):
        if deadline is None and coordinator.poll() is not None:
            deadline = time.monotonic() + AGENT_EXIT_GRACE
        if deadline is not None and time.monotonic() > deadline:
            for agent in agents:
                if agent.poll() is None:
                    agent.kill()
        time.sleep(0.05)
    if received:
        return contract.EXIT_INTERRUPTED_BASE + received[0]
    codes = [exit_status(a.returncode) for a in agents]
    return codes[0] or next((c for c in codes if c), 0)
