"""Start and stop a test cluster: what ``up``, ``down`` and the pytest fixture share.

A cluster is one supervisor process (``supervisor.py``) and its state directory. ``start`` runs the
supervisor and waits for its ``ready`` file. Attached (the fixture), the supervisor exits when the process
that started it is gone, killed or not, and takes every component with it; detached (``up``), it runs
until ``down`` (or ``stop``) sends it SIGTERM.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from testbed.agents import ROOT, project_env
from testbed.cluster.paths import cache_root
from testbed.cluster.waiting import Abort, Timeout, die_with_parent, wait_for

READY_TIMEOUT = 600.0
"""Seconds ``start`` waits for the supervisor's ``ready`` file (the API server takes tens of seconds cold)."""


STATE_SETTING = "TRAINPLANE_CLUSTER_STATE"
"""Names the state directory ``up``, ``env`` and ``down`` use instead of the default."""


def default_state() -> Path:
    """The state directory ``up``, ``env`` and ``down`` use: ``$TRAINPLANE_CLUSTER_STATE``, else
    ``<cache>/run/default``."""
    explicit = os.environ.get(STATE_SETTING)
    return Path(explicit) if explicit else cache_root() / "run" / "default"


@dataclass(frozen=True)
class Cluster:
    """A running test cluster.

    Attributes:
        state: its state directory (removed by ``stop``).
        kubeconfig: the admin kubeconfig (client certificate of a ``system:masters`` user).
        server: the API server's URL (``https://127.0.0.1:PORT``).
        pid: the supervisor's pid.
    """

    state: Path
    kubeconfig: Path
    server: str
    pid: int

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM the supervisor, wait until it has exited, remove the state directory."""
        stop_pid(self.pid, timeout)
        shutil.rmtree(self.state, ignore_errors=True)


def _read_ready(state: Path) -> Cluster | None:
    try:
        ready = json.loads((state / "ready").read_text())
    except FileNotFoundError:
        return None
    return Cluster(state, Path(ready["kubeconfig"]), ready["server"], int(ready["pid"]))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def stop_pid(pid: int, timeout: float) -> None:
    """SIGTERM ``pid`` and wait until it is gone (reaping it if it is our child).

    Raises:
        Timeout: it still runs after ``timeout`` seconds.
    """
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return

    def gone() -> bool:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        return not _alive(pid)

    wait_for(gone, timeout, f"the test cluster's supervisor (pid {pid}) to exit")


def start(state: Path, attached: bool = True, timeout: float = READY_TIMEOUT) -> Cluster:
    """Start a cluster in ``state`` (made afresh) and wait until its API answers and its nodes are Ready.

    Args:
        state: its state directory; an existing one is removed first.
        attached: the supervisor dies with this process (True) or runs on in its own session (False).
        timeout: seconds to wait for it.

    Raises:
        Abort: the supervisor exited first (the message has its last log lines).
        Timeout: it did not get ready in time (it is stopped then).
    """
    shutil.rmtree(state, ignore_errors=True)
    state.mkdir(parents=True)
    log = state / "supervisor.log"
    argv = [sys.executable, "-m", "testbed.cluster.supervisor", str(state)]
    if attached:
        argv += ["--parent", str(os.getpid())]
    with log.open("ab") as out:
        process = subprocess.Popen(argv, cwd=ROOT, env=project_env(), stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=not attached,
                                   preexec_fn=die_with_parent(signal.SIGTERM) if attached else None)  # noqa: PLW1509

    def ready() -> Cluster | None:
        if process.poll() is not None:
            tail = log.read_text(errors="replace").splitlines()[-20:]
            raise Abort(f"the test cluster failed to start (exit {process.returncode}):\n" + "\n".join(tail))
        return _read_ready(state)

    try:
        return wait_for(ready, timeout, "the test cluster", interval=0.5)
    except Timeout:
        stop_pid(process.pid, 60.0)
        raise


def running(state: Path | None = None) -> Cluster:
    """The cluster running in ``state`` (default ``default_state()``).

    Raises:
        Abort: none runs there (start one with ``python -m testbed.cluster up``).
    """
    state = state or default_state()
    cluster = _read_ready(state)
    if cluster is None or not _alive(cluster.pid):
        raise Abort(f"no test cluster runs in {state}; start one with: python -m testbed.cluster up")
    return cluster


def up(state: Path | None = None) -> Cluster:
    """Start a detached cluster in ``state`` (default ``default_state()``), stopping one already there."""
    state = state or default_state()
    down(state)
    return start(state, attached=False)


def down(state: Path | None = None) -> bool:
    """Stop the cluster in ``state`` (default ``default_state()``) and remove its state.

    Returns:
        whether a cluster was running there.
    """
    state = state or default_state()
    cluster = _read_ready(state)
    running = cluster is not None and _alive(cluster.pid)
    if cluster is not None:
        stop_pid(cluster.pid, 60.0)
    shutil.rmtree(state, ignore_errors=True)
    return running
