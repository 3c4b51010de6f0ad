"""Agents started by hand, as real processes, for tests and benchmarks.

``AgentCluster`` starts real agent processes (real user processes) one by one, so a benchmark or test
can add, stop or kill single nodes, as a StatefulSet's pods come and go.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from runtime.agent.errors import TransportError
from runtime.agent.net.transport import request_json
from runtime.local.launch_plan import free_port

ROOT = Path(__file__).resolve().parents[1]


def project_env(**extra: str) -> dict[str, str]:
    """The current environment with the repository on PYTHONPATH, plus ``extra``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


class AgentCluster:
    """Agents started by hand (no launcher), so a test can add, stop or kill single nodes.

    Args:
        tmp_path: working directory for logs.
        entrypoint: the user command after the interpreter.
        workers: initial nodes; node ``i`` listens on 127.0.0.(10+i).
        settings: extra agent settings (contract env names to values).
    """

    def __init__(self, tmp_path: Path, entrypoint: list[str], workers: int, **settings: str) -> None:
        self.tmp_path = tmp_path
        self.token = secrets.token_urlsafe(16)
        self.job = f"job-{secrets.token_hex(4)}"
        self.port = free_port("127.0.0.1")
        self.settings = {
            "TRAINPLANE_JOB": self.job, "TRAINPLANE_TOKEN": self.token, "TRAINPLANE_WORKERS": str(workers),
            "TRAINPLANE_NUM_PROC": "1", "TRAINPLANE_ENTRYPOINT": json.dumps(entrypoint),
            "TRAINPLANE_COORDINATOR": f"127.0.0.10:{self.port}", "TRAINPLANE_AGENT_PORT": str(self.port),
            "MASTER_PORT": str(free_port("127.0.0.10", [self.port])), "TRAINPLANE_GRACE_PERIOD": "2",
            "TRAINPLANE_RUN_ROOT": str(tmp_path / "run"),
            **settings,
        }
        self.agents: dict[int, subprocess.Popen[str]] = {}
        for node_id in range(workers):
            self.add(node_id)

    def address(self, node_id: int) -> str:
        """The loopback address node ``node_id`` advertises (``127.0.0.<10 + node_id>``)."""
        return f"127.0.0.{10 + node_id}"

    def add(self, node_id: int) -> subprocess.Popen[str]:
        """Start the agent of node ``node_id`` (a real ``python -m runtime.agent`` process, its log in
        ``agent-<node_id>.log``); returns its process."""
        env = project_env(**self.settings, TRAINPLANE_NODE_RANK=str(node_id),
                          TRAINPLANE_ADVERTISE_ADDRESS=self.address(node_id))
        log = open(self.tmp_path / f"agent-{node_id}.log", "w")  # noqa: SIM115 - the agent owns it
        self.agents[node_id] = subprocess.Popen([sys.executable, "-m", "runtime.agent"], cwd=ROOT, env=env,
                                                stdout=log, stderr=subprocess.STDOUT, text=True)
        return self.agents[node_id]

    def log(self, node_id: int) -> str:
        """Everything node ``node_id``'s agent has written so far."""
        return (self.tmp_path / f"agent-{node_id}.log").read_text()

    def members(self) -> dict[str, Any]:
        """The coordinator's membership snapshot.

        Raises:
            TransportError: as ``request_json``; when no response came, the message adds each agent's exit code
                (``None``: running) and every agent's log, which a test asking in a ``wait_until`` would
                otherwise lose.
        """
        try:
            return request_json("127.0.0.10", self.port, "GET", "/members", self.token, job=self.job)
        except TransportError as error:
            if error.status is not None:
                raise
            raise TransportError(f"{error}\n{self.account()}") from error

    def account(self) -> str:
        """Each agent's exit code (``None``: still running) and log."""
        codes = {node_id: agent.poll() for node_id, agent in self.agents.items()}
        return "\n".join(f"--- agent {i} (exit code {code}) ---\n{self.log(i)}" for i, code in codes.items())

    def children(self, node_id: int) -> list[int]:
        """Pids of the user processes of a node's agent."""
        pid = self.agents[node_id].pid
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]

    def kill(self, node_id: int) -> None:
        """SIGKILL a node's agent and its user processes together: a silent node loss. Processes that
        the agent's death already took down (parent-death signal) are skipped."""
        victims = self.children(node_id)
        self.agents[node_id].kill()
        for pid in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def wait(self, timeout: float) -> dict[int, int]:
        """Each agent's exit code by node id, waiting up to ``timeout`` seconds per agent.

        Raises:
            subprocess.TimeoutExpired: an agent is still running after ``timeout``.
        """
        return {i: a.wait(timeout=timeout) for i, a in self.agents.items()}

    def close(self) -> None:
        """SIGKILL every agent still running and reap it."""
        for agent in self.agents.values():
            if agent.poll() is None:
                agent.kill()
                agent.wait()
