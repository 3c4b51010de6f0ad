"""Single-controller plans as pure functions: each node's daemon, the driver's environment, the verdict."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from runtime.agent import contract
from runtime.agent.execution import controller
from runtime.agent.execution.bootstrap import wait_for
from runtime.agent.execution.daemon import EXIT_NOT_FOUND, resolve
from runtime.agent.execution.environment import process_env
from runtime.agent.rendezvous.actions import Push
from runtime.agent.rendezvous.coordinator import Coordinator
from runtime.agent.spec.job import JobSpec
from runtime.agent.spec.ports import framework_ports
from runtime.agent.spec.status import FAILED, SUCCEEDED
from runtime.agent.world import Failure, Node, World
from testbed.settings import agent_settings
from tests.conftest import ROOT, project_env

pytestmark = pytest.mark.process


def world(distribution: str, addrs: tuple[str, ...] = ("10.0.0.1", "10.0.0.2", "10.0.0.3")) -> World:
    spec = JobSpec(workers=len(addrs), distribution=distribution, entrypoint=("d.py",))
    nodes = tuple(Node(i, a, 32300, spec.local_world_size(i)) for i, a in enumerate(addrs))
    return World("job", 1, 0, 0, nodes, 29500, distribution)


def test_ray_head_on_node_0_and_workers_pointed_at_it_from_the_reserved_ports():
    w = world("ray")
    head = controller.daemon(w, 0, extra_args=("--num-cpus=2",))
    assert head is not None and head.name == "ray head" and head.wait_for == ""
    assert head.argv == (
        "ray", "start", "--head", "--block", "--node-ip-address=10.0.0.1", "--disable-usage-stats", "--port=29532",
        "--ray-client-server-port=29533", "--dashboard-port=29534", "--include-dashboard=false", "--num-cpus=2",
    )
    worker = controller.daemon(w, 2, prefix=("numactl", "-N0"))
    assert worker is not None and worker.name == "ray worker" and worker.wait_for == "10.0.0.1:29532"
    assert worker.argv == ("numactl", "-N0", "ray", "start", "--address=10.0.0.1:29532", "--block",
                           "--node-ip-address=10.0.0.3", "--disable-usage-stats")
    assert controller.driver_wait(w) == controller.DriverWait(("10.0.0.1:29532",), ("10.0.0.1", "10.0.0.2", "10.0.0.3"))


def test_every_monarch_node_serves_its_own_address_and_the_driver_waits_for_all():
    w = world("monarch", ("10.0.0.1", "fd00::2"))
    plans = [controller.daemon(w, i, python="/usr/bin/python3") for i in range(2)]
    assert [p.argv[-1] for p in plans if p] == ["tcp://10.0.0.1:29532", "tcp://[fd00::2]:29532"]
    assert all(p and p.argv[:3] == ("/usr/bin/python3", "-c", controller.MONARCH_WORKER) and not p.wait_for
               for p in plans)
    assert controller.driver_wait(w) == controller.DriverWait(("10.0.0.1:29532", "[fd00::2]:29532"))


@pytest.mark.parametrize("distribution", ["spmd", "pytorch", "jax", "tensorflow"])
def test_spmd_distributions_run_no_daemon(distribution: str):
    w = world(distribution)
    assert controller.daemon(w, 0) is None and framework_ports(distribution, 29500) == ()


def test_named_ports_follow_the_master_port():
    assert framework_ports("ray", 30000) == (("ray-head", 30032), ("ray-client", 30033))
    assert framework_ports("monarch", 30000) == (("monarch", 30032),)


@pytest.mark.parametrize(("distribution", "variable", "value"), [
    ("ray", contract.RAY_ADDRESS, "10.0.0.1:29532"),
    ("monarch", contract.MONARCH_WORKER_ADDRESSES, "tcp://10.0.0.1:29532,tcp://10.0.0.2:29532,tcp://10.0.0.3:29532"),
])
def test_the_driver_is_rank_0_of_1_and_knows_every_node(distribution: str, variable: str, value: str):
    w = world(distribution)
    assert w.world_size == 1
    env = process_env(w, 0, 0)
    assert env[variable] == value
    assert (env["WORLD_SIZE"], env["RANK"], env["LOCAL_WORLD_SIZE"], env["NODE_WORLD_SIZE"]) == ("1", "0", "1", "3")
    assert env["POD_IPS"] == "10.0.0.1,10.0.0.2,10.0.0.3"
    with pytest.raises(IndexError):
        process_env(w, 1, 0)


def coordinator(distribution: str) -> Coordinator:
    s = agent_settings(workers=3, entrypoint=("d.py",), coordinator="c", distribution=distribution)
    c = Coordinator(s, now=0.0)
    for n in world(distribution).nodes:
        c.register(n, 0.0)
    return c


def test_the_drivers_success_ends_the_job_without_the_daemon_only_nodes():
    c = coordinator("ray")
    [push] = [a for a in c.report(0, 1, SUCCEEDED) if isinstance(a, Push)]
    assert push.world.status == SUCCEEDED and push.world.exit_code == 0
    assert [n.node_id for n in push.targets] == [0, 1, 2]


def test_a_failed_daemon_is_the_root_cause_by_name():
    c = coordinator("monarch")
    failure = Failure(rank=-1, node_id=2, local_rank=-1, exit_code=5, stderr_tail=("lost",), addr="10.0.0.3",
                      daemon="monarch worker")
    [push] = [a for a in c.report(2, 1, FAILED, failure) if isinstance(a, Push)]
    assert push.world.status == FAILED and push.world.exit_code == 5 and push.world.cause == failure
    assert push.world.message.startswith("the monarch worker daemon (node 2 at 10.0.0.3) exited with code 5 "
                                         "while the driver was running; last stderr lines:\n    lost")


def test_daemon_commands_are_found_beside_the_interpreter_before_path(tmp_path: Path):
    beside, on_path = tmp_path / "venv", tmp_path / "bin"
    for d in (beside, on_path):
        d.mkdir()
        (d / "ray").write_text("#!/bin/sh\n")
        (d / "ray").chmod(0o755)
    assert resolve("ray", python=str(beside / "python"), path=str(on_path)) == str(beside / "ray")
    (beside / "ray").unlink()
    assert resolve("ray", python=str(beside / "python"), path=str(on_path)) == str(on_path / "ray")
    assert resolve("ray", python=str(beside / "python"), path=str(tmp_path)) is None


def test_a_missing_daemon_executable_is_one_line_naming_it():
    result = subprocess.run([sys.executable, "-m", "runtime.agent.execution.daemon", "ray head", "no-such-ray-binary",
                             "start"], cwd=ROOT, env=project_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == EXIT_NOT_FOUND
    assert result.stderr.strip().splitlines() == [
        f"trainplane: cannot start the ray head: no executable 'no-such-ray-binary' beside {sys.executable} or on "
        f"PATH; install it in the image"
    ]


def test_the_bootstrap_waits_until_the_head_accepts_connections():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    waited = threading.Event()
    thread = threading.Thread(target=lambda: (wait_for(f"127.0.0.1:{port}", 60.0), waited.set()))
    thread.start()
    assert not waited.wait(0.5), "returned before anything listened"
    with socket.create_server(("127.0.0.1", port)):
        thread.join(60.0)
        assert waited.is_set()
    with pytest.raises(SystemExit, match=f"127.0.0.1:{port} \\(the job's head\\) did not accept connections within"):
        wait_for(f"127.0.0.1:{port}", 0.2)
    with pytest.raises(SystemExit, match="is not host:port"):
        wait_for("nowhere", 1.0)
