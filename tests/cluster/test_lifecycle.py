"""``python -m testbed.cluster up|down`` and the session fixture: a real etcd, API server, controller
manager, scheduler and kwok on loopback; nodes shaped like the stacks'; nothing left behind."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from kubernetes import client, config

from runtime.agent import contract
from testbed.cluster import realnode, versions
from testbed.cluster.lifecycle import Cluster
from tests.conftest import ROOT, processes_with, project_env, wait_until

pytestmark = pytest.mark.cluster


def test_the_nodes_are_shaped_like_the_stacks_nodes_and_ready(cluster: Cluster, api: client.ApiClient) -> None:
    """kwok's nodes; the real node (``realnode.LABEL``), which the session's real-node tests add, is not one."""
    assert cluster.server.startswith("https://127.0.0.1:")
    assert client.VersionApi(api).get_code().git_version == versions.KUBERNETES
    nodes = {n.metadata.name: n for n in client.CoreV1Api(api).list_node().items
             if (n.metadata.labels or {}).get(realnode.LABEL[0]) != realnode.LABEL[1]}
    assert sorted(nodes) == ["cpu-0", "cpu-1", "gpu-0", "gpu-1"]
    for name, node in nodes.items():
        assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions), name
        gpus = node.status.allocatable.get(contract.GPU_RESOURCE)
        taints = [(t.key, t.value, t.effect) for t in node.spec.taints or []]
        if name.startswith("gpu"):
            assert gpus == "1"
            assert taints == [(contract.GPU_TAINT_KEY, "true", "NoSchedule")]
            assert node.metadata.labels[contract.GPU_NODE_LABEL] == "true"
        else:
            assert gpus is None
            assert taints == []


def test_up_prints_the_kubeconfig_and_down_stops_everything(tmp_path: Path) -> None:
    state = tmp_path / "state"
    up = subprocess.run([sys.executable, "-m", "testbed.cluster", "up", "--state", str(state)], cwd=ROOT,
                        env=project_env(), capture_output=True, text=True, timeout=900, check=False)
    assert up.returncode == 0, up.stderr
    kubeconfig = Path(up.stdout.strip().splitlines()[-1])
    assert kubeconfig == state / "kubeconfig"
    core = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))
    assert len(core.list_node().items) == 4
    running = processes_with(str(state))
    commands = " ".join(Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace") for pid in running)
    for component in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"):
        assert component in commands
    down = subprocess.run([sys.executable, "-m", "testbed.cluster", "down", "--state", str(state)], cwd=ROOT,
                          env=project_env(), capture_output=True, text=True, timeout=120, check=False)
    assert down.returncode == 0, down.stderr
    assert not state.exists()
    assert wait_until(lambda: not processes_with(str(state)), 30), processes_with(str(state))


def test_a_killed_test_run_leaves_no_cluster_process(tmp_path: Path) -> None:
    """The fixture's path (``lifecycle.start``, attached) in a process that is then SIGKILLed."""
    state = tmp_path / "state"
    program = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from testbed.cluster import lifecycle
        cluster = lifecycle.start(Path({str(state)!r}))
        print(cluster.kubeconfig, flush=True)
        sys.stdin.read()
    """)
    run = subprocess.Popen([sys.executable, "-c", program], cwd=ROOT, env=project_env(), stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    try:
        assert run.stdout is not None
        assert run.stdout.readline().strip() == str(state / "kubeconfig")
        ready = json.loads((state / "ready").read_text())
        assert ready["pid"] in processes_with(str(state))
        assert len(processes_with(str(state))) >= 6  # the supervisor and its five components
        run.send_signal(signal.SIGKILL)
        run.wait(10)
        assert wait_until(lambda: not processes_with(str(state)), 60), processes_with(str(state))
    finally:
        run.kill()
        run.wait()
