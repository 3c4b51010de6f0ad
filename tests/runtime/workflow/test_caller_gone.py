"""A caller that goes mid-call (Ctrl-C, killed, its connection cut) cancels the call on every rank, as a
call timeout does, and the next call runs at once in the same processes.

Real jobs and real drivers: each test starts a driver process (``testbed/caller_driver.py``) or
calls from this one, waits until every rank runs ``service_fns.mark_then_wait`` (which would wait two
minutes for a gate file nobody creates), then interrupts the caller. Ctrl-C is SIGINT to the driver's
whole process group, as a terminal sends it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.agent.errors import TransportError
from runtime.client import JobClient
from runtime.local.jobs import LocalJob, LocalJobSpec
from runtime.workflow.portforward import Relay
from testbed.fake_apiserver import FakeApiServer
from testbed.jobs import serving
from tests.conftest import ROOT, project_env, wait_until

pytestmark = pytest.mark.process

FNS = "testbed.service_fns"
RANKS = (0, 1)
WAIT = 120.0
"""Seconds any condition here may take on a loaded machine (never a measure of speed)."""


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalJob]:
    spec = LocalJobSpec(workers=2, num_proc=1, mode="service", master_port=0, grace_period=1.0,
                        log_dir=str(tmp_path_factory.mktemp("caller") / "logs"))
    with serving(spec, ready_timeout=120) as started:
        yield started


def marks(prefix: Path, suffix: str = "") -> dict[int, int]:
    """The pids the ranks wrote to ``<prefix>-<rank><suffix>``, for the ranks that did."""
    found = {}
    for r in RANKS:
        path = Path(f"{prefix}-{r}{suffix}")
        if path.exists() and path.read_text():
            found[r] = int(path.read_text())
    return found


def running_everywhere(prefix: Path) -> bool:
    return set(marks(prefix)) == set(RANKS)


def driver(*args: str) -> subprocess.Popen[str]:
    """Start ``testbed.caller_driver ARGS`` in a process group of its own (its terminal's)."""
    return subprocess.Popen([sys.executable, "-m", "testbed.caller_driver", *args], cwd=ROOT,
                            env=project_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def ctrl_c(process: subprocess.Popen[str]) -> None:
    """What a terminal does on Ctrl-C: SIGINT to the foreground process group."""
    os.killpg(process.pid, signal.SIGINT)


def assert_cancelled_and_next_call_runs(prefix: Path, whoami: list[dict]) -> None:
    """Every rank's call was interrupted (not left running, not its process replaced), and ``whoami``
    (the next call's results) came from the same processes."""
    assert marks(prefix, ".cancelled") == marks(prefix), "every rank's call was interrupted in its own process"
    assert [r["rank"] for r in whoami] == list(RANKS)
    assert {r["rank"]: r["pid"] for r in whoami} == marks(prefix), "the next call ran in the same processes"


def next_call(job: LocalJob) -> list[dict]:
    """A call from a new client: it gets the job's one call slot only once the last call has ended."""
    with JobClient(job.url, job.token) as client:
        return client.call(f"{FNS}:whoami", timeout=WAIT)


def test_ctrl_c_in_an_existing_compute_driver_cancels_the_call_and_its_next_call_runs(job: LocalJob, tmp_path):
    prefix, gate = tmp_path / "mark", tmp_path / "gate"
    process = driver("existing", job.url, job.token, str(prefix), str(gate))
    try:
        assert wait_until(lambda: running_everywhere(prefix), WAIT), process.stderr
        ctrl_c(process)
        out, err = process.communicate(timeout=WAIT)
    finally:
        process.kill()
    lines = out.splitlines()
    assert lines[:2] == ["calling", "interrupted"], (out, err)
    assert process.returncode == 0, err
    assert_cancelled_and_next_call_runs(prefix, json.loads(lines[2]))


def test_a_killed_driver_leaves_no_call_behind(job: LocalJob, tmp_path):
    prefix, gate = tmp_path / "mark", tmp_path / "gate"
    process = driver("existing", job.url, job.token, str(prefix), str(gate))
    try:
        assert wait_until(lambda: running_everywhere(prefix), WAIT)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=WAIT)
    finally:
        process.kill()
    assert_cancelled_and_next_call_runs(prefix, next_call(job))


def test_a_connection_cut_on_the_way_cancels_the_call(job: LocalJob, tmp_path):
    prefix, gate = tmp_path / "mark", tmp_path / "gate"
    coordinator = (job.plan.addresses[0], job.plan.ports[0])
    relay = Relay(lambda: socket.create_connection(coordinator, timeout=10), describe="the coordinator")
    failures: list[BaseException] = []

    def call() -> None:
        with JobClient(relay.url, job.token) as client:
            try:
                client.call(f"{FNS}:mark_then_wait", str(prefix), str(gate))
            except TransportError as exc:
                failures.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    try:
        assert wait_until(lambda: running_everywhere(prefix), WAIT)
        relay.close()  # the network between the caller and the job goes
        caller.join(WAIT)
    finally:
        relay.close()
    assert len(failures) == 1 and failures[0].status is None, failures
    assert_cancelled_and_next_call_runs(prefix, next_call(job))


@pytest.mark.parametrize("how", ["ctrl-c", "kill"])
def test_a_driver_on_a_port_forward_going_cancels_the_call(job: LocalJob, tmp_path, how: str):
    """The path of ``KubernetesCompute``: the driver's relay and the ``kubernetes`` client's port-forward
    (a WebSocket to the stand-in API server, which forwards to the job): when the driver goes, the
    WebSocket closes, the API server's side closes its connection to the pod, and the call ends."""
    prefix, gate = tmp_path / "mark", tmp_path / "gate"
    coordinator = (job.plan.addresses[0], job.plan.ports[0])
    api = FakeApiServer(lambda _ns, pod, _port: coordinator if pod == "trainer-0" else None)
    try:
        kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
        process = driver("portforward", str(kubeconfig), "trainer-0", job.token, str(prefix), str(gate))
        try:
            assert wait_until(lambda: running_everywhere(prefix), WAIT), process.stderr
            if how == "ctrl-c":
                ctrl_c(process)
                out, err = process.communicate(timeout=WAIT)
                assert out.splitlines()[:2] == ["calling", "interrupted"], (out, err)
                assert_cancelled_and_next_call_runs(prefix, json.loads(out.splitlines()[2]))
            else:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=WAIT)
                assert_cancelled_and_next_call_runs(prefix, next_call(job))
        finally:
            process.kill()
    finally:
        api.close()


def test_ctrl_c_in_a_local_compute_driver_cancels_the_call_and_keeps_the_job(tmp_path):
    """The terminal's SIGINT reaches the driver's process group only: the job's agents run in a session
    of their own, so the job survives for the next call (and still stops with the driver)."""
    prefix, gate = tmp_path / "mark", tmp_path / "gate"
    process = driver("local", str(prefix), str(gate))
    try:
        assert wait_until(lambda: running_everywhere(prefix), WAIT), process.stderr
        ctrl_c(process)
        out, err = process.communicate(timeout=WAIT)
    finally:
        process.kill()
    lines = out.splitlines()
    assert lines[:2] == ["calling", "interrupted"], (out, err)
    assert process.returncode == 0, err
    assert_cancelled_and_next_call_runs(prefix, json.loads(lines[2]))
