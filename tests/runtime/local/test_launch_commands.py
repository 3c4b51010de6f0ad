"""``--no-python``: a command run as is on every rank, with the contract, dying with its agent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from runtime.local import jobs
from tests.conftest import ROOT, launch, processes_with, project_env, wait_until

pytestmark = pytest.mark.process


def test_no_python_runs_a_command_as_is_on_every_rank_with_the_contract():
    report = 'echo "$RANK $WORLD_SIZE $LOCAL_RANK $NODE_RANK $(basename "$(readlink /proc/$$/exe)")"'
    result = launch("--workers", "2", "--num-proc", "2", "--master-port", "0", "--no-python", "sh", "-c", report)
    assert result.returncode == 0, result.stderr
    lines = sorted(line.rsplit(" ", 1) for line in result.stdout.splitlines() if line.startswith("[rank "))
    assert [line for line, _ in lines] == [f"[rank {r}] {r} 4 {r % 2} {r // 2}" for r in range(4)]
    assert all("python" not in exe for _, exe in lines), "the command replaces the bootstrap, no interpreter"


def test_a_command_that_cannot_be_found_fails_the_job_with_127_and_says_why():
    result = launch("--workers", "1", "--no-python", "no-such-command-trainplane", "--flag", timeout=60)
    assert result.returncode == 127
    assert "cannot run command 'no-such-command-trainplane': No such file or directory" in result.stderr
    assert "exited with code 127" in result.stderr


def test_a_command_dies_with_its_agent():
    marker = f"marker-{uuid.uuid4().hex}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "runtime", "launch", "--workers", "1", "--num-proc", "1", "--master-port", "0",
         "--job-name", marker, "--no-python", "sleep", "300"],
        cwd=ROOT, env=project_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        assert wait_until(lambda: len(with_argv0(marker, b"sleep")) == 1, timeout=30)
        (command,) = with_argv0(marker, b"sleep")
        started = jobs.agent_command()[1:]
        (agent,) = [pid for pid in processes_with(marker) if command_line(pid)[1:] == [a.encode() for a in started]]
        os.kill(agent, signal.SIGKILL)  # the agent cannot tear down: only the parent-death signal is left
        assert wait_until(lambda: command_line(command) != [b"sleep", b"300"], timeout=15)
    finally:
        proc.kill()
        proc.wait()


def command_line(pid: int) -> list[bytes]:
    """A process's argv, empty if it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
    except OSError:
        return []


def with_argv0(marker: str, name: bytes) -> list[int]:
    """Live processes mentioning ``marker`` whose program is ``name``."""
    return [pid for pid in processes_with(marker) if command_line(pid)[:1] == [name]]
