"""Shared helpers: run the launcher and agents as real processes, inspect the process table."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

ROOT = Path(__file__).resolve().parents[1]


def project_env(**extra: str) -> dict[str, str]:
    """The current environment with the repository on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


def launch(*args: str, timeout: float = 120.0, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Run ``python -m runtime launch ARGS`` to completion and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "runtime", "launch", *args],
        cwd=cwd, env=project_env(), capture_output=True, text=True, timeout=timeout,
    )


def processes_with(marker: str) -> list[int]:
    """Pids of live processes whose command line or environment mentions ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            blob = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().split(") ", 1)[1][0]
        except OSError:
            continue
        if marker.encode() in blob and state != "Z":
            found.append(int(entry.name))
    return found


def wait_until(condition: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """Poll ``condition`` until it is true or ``timeout`` seconds pass; return its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return condition()


@pytest.fixture
def script(tmp_path: Path) -> Callable[[str], Path]:
    """Write a user script into the test's temporary directory; returns its path."""

    def write(source: str, name: str = "job.py") -> Path:
        path = tmp_path / name
        path.write_text(source)
        return path

    return write


class LocalJob:
    """Agents started by hand (no launcher), so a test can add, stop or kill single nodes.

    Args:
        tmp_path: working directory for logs.
        entrypoint: the user command after the interpreter.
        workers: initial nodes; node ``i`` listens on 127.0.0.(10+i).
        settings: extra agent settings (contract env names to values).
    """

    def __init__(self, tmp_path: Path, entrypoint: list[str], workers: int, **settings: str) -> None:
        import json
        import secrets

        from runtime.launch import free_port

        self.tmp_path = tmp_path
        self.token = secrets.token_urlsafe(16)
        self.job = f"job-{secrets.token_hex(4)}"
        self.port = free_port("127.0.0.1")
        self.settings = {
            "TRAINPLANE_JOB": self.job, "TRAINPLANE_TOKEN": self.token, "TRAINPLANE_WORKERS": str(workers),
            "TRAINPLANE_NUM_PROC": "1", "TRAINPLANE_ENTRYPOINT": json.dumps(entrypoint),
            "TRAINPLANE_COORDINATOR": f"127.0.0.10:{self.port}", "TRAINPLANE_AGENT_PORT": str(self.port),
            "MASTER_PORT": str(free_port("127.0.0.10", [self.port])), "TRAINPLANE_GRACE_PERIOD": "2",
            **settings,
        }
        self.agents: dict[int, subprocess.Popen[str]] = {}
        for node_id in range(workers):
            self.add(node_id)

    def address(self, node_id: int) -> str:
        return f"127.0.0.{10 + node_id}"

    def add(self, node_id: int) -> subprocess.Popen[str]:
        env = project_env(**self.settings, TRAINPLANE_NODE_RANK=str(node_id),
                          TRAINPLANE_ADVERTISE_ADDRESS=self.address(node_id))
        log = open(self.tmp_path / f"agent-{node_id}.log", "w")  # noqa: SIM115 - the agent owns it
        self.agents[node_id] = subprocess.Popen([sys.executable, "-m", "runtime.agent"], cwd=ROOT, env=env,
                                                stdout=log, stderr=subprocess.STDOUT, text=True)
        return self.agents[node_id]

    def log(self, node_id: int) -> str:
        return (self.tmp_path / f"agent-{node_id}.log").read_text()

    def members(self) -> dict:
        from runtime.agent.transport import request_json

        return request_json("127.0.0.10", self.port, "GET", "/members", self.token)

    def children(self, node_id: int) -> list[int]:
        """Pids of the user processes of a node's agent."""
        pid = self.agents[node_id].pid
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]

    def wait(self, timeout: float) -> dict[int, int]:
        return {i: a.wait(timeout=timeout) for i, a in self.agents.items()}

    def close(self) -> None:
        for agent in self.agents.values():
            if agent.poll() is None:
                agent.kill()
                agent.wait()
