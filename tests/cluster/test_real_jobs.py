"""DistributedJobs deployed with ``pulumi up`` (the real engine, the YAML language host, the kubernetes provider)
that really run on the real node (``testbed/cluster/realnode.py``): the Indexed Job's pods start the agents in
containers, find each other through the headless Service's DNS names (CoreDNS), train with gloo over the pod
network, and the Job controller sees their exit codes (issue 22, item 2).

Every pod runs the host's Python and the project's venv, mounted read-only (``images.host_python_volumes``), and
the repository's ``examples/`` the same way, as the job's working directory.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from components import DistributedJobArgs
from components.job.bundle import build_bundle
from components.job.render import RenderedJob, render_job
from runtime.agent import contract
from testbed.agents import ROOT
from testbed.cluster import images, realnode
from testbed.cluster.engine import Engine
from testbed.cluster.lifecycle import Cluster
from testbed.cluster.programs import job_resources, write_program
from testbed.cluster.realnode import RealNode
from testbed.cluster.waiting import Timeout, wait_for
from tests.components.componenttest import TOKEN

pytestmark = pytest.mark.cluster

WAIT = 420.0
"""Seconds a 2-node x 2-process job may take from ``pulumi up`` to its end on a busy 2-core machine."""


def real_job(namespace: str, record: Path | None = None, **overrides: Any) -> DistributedJobArgs:
    """A job of the host-Python image on the real node, the repository mounted read-only as its working
    directory and ``record`` (a directory of the test) writable at ``/record``; ``overrides`` are
    DistributedJobArgs fields."""
    volumes, mounts = images.host_python_volumes()
    volumes.append({"name": "repository", "hostPath": {"path": str(ROOT), "type": "Directory"}})
    mounts.append({"name": "repository", "mountPath": str(ROOT), "readOnly": True})
    if record is not None:
        volumes.append({"name": "record", "hostPath": {"path": str(record), "type": "Directory"}})
        mounts.append({"name": "record", "mountPath": "/record"})
    base: dict[str, Any] = {"image": images.PYTHON_IMAGE, "namespace": namespace, "working_dir": str(ROOT),
                            "volumes": volumes, "volume_mounts": mounts, "cpus": None, "memory": None,
                            "distribution": "pytorch", **realnode.placement()}
    base.update(overrides)
    return DistributedJobArgs(**base)


def up(tmp_path: Path, cluster: Cluster, name: str, args: DistributedJobArgs) -> tuple[Engine, RenderedJob]:
    """``pulumi up`` of job ``name`` on a fresh stack; returns the engine and what it deployed."""
    job = render_job(name, args, TOKEN, build_bundle())
    engine = Engine(tmp_path / "program", tmp_path / "state", cluster.kubeconfig)
    write_program(engine.project, "real-job", job_resources(name, job))
    engine.run("stack", "init", "test")
    engine.run("up", "--yes")
    return engine, job


def job_condition(api: client.ApiClient, name: str, namespace: str) -> dict[str, Any] | None:
    """The Job's Complete or Failed condition (``type``, ``reason``, ``message``) once it has one."""
    job = client.BatchV1Api(api).read_namespaced_job(name, namespace).to_dict()
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition["type"] in ("Complete", "Failed") and condition["status"] == "True":
            return dict(condition)
    return None


def pod_logs(api: client.ApiClient, name: str, namespace: str) -> dict[str, str]:
    """Each pod of Job ``name`` -> its container's log, read through the API server from the kubelet."""
    core = client.CoreV1Api(api)
    pods = core.list_namespaced_pod(namespace, label_selector=f"job-name={name}").to_dict()["items"]
    return {p["metadata"]["name"]: core.read_namespaced_pod_log(p["metadata"]["name"], namespace) for p in pods}


def shown(condition: dict[str, Any], logs: dict[str, str]) -> str:
    """A failed assertion's message: every pod's log printed whole first (pytest shows a failing test's captured
    output in full, where it cuts a long assertion message, so a CI run that failed keeps what the pods said)."""
    for pod, log in logs.items():
        print(f"----- pod {pod} -----\n{log}")
    return f"the Job ended {condition.get('type')}: {condition.get('reason')}: {condition.get('message')}"


def log_so_far(api: client.ApiClient, pod: str, namespace: str) -> str:
    """Pod ``pod``'s log so far; empty while its container has not started (the API server answers 400)."""
    try:
        return str(client.CoreV1Api(api).read_namespaced_pod_log(pod, namespace))
    except client.ApiException as exc:
        if exc.status in (400, 404):
            return ""
        raise


def job_pods(api: client.ApiClient, name: str, namespace: str) -> dict[str, str]:
    """Job ``name``'s pods by completion index (``"0"``, ``"1"``, ...) -> pod name."""
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=f"job-name={name}").to_dict()["items"]
    return {p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]: p["metadata"]["name"]
            for p in pods if p["metadata"].get("deletion_timestamp") is None}


def job_end(api: client.ApiClient, name: str, namespace: str) -> dict[str, Any]:
    """Job ``name``'s Complete or Failed condition, within ``WAIT`` seconds.

    Raises:
        AssertionError: it has neither by then; the message has the end of every pod's log so far (a timeout in
            CI is then read from the log, not guessed).
    """
    try:
        return wait_for(lambda: job_condition(api, name, namespace), WAIT, f"job {name} to finish")
    except Timeout as timeout:
        tails = {pod: log_so_far(api, pod, namespace)[-4000:] for pod in job_pods(api, name, namespace).values()}
        raise AssertionError(f"{timeout}; the end of each pod's log: {tails}") from timeout


def test_pulumi_up_of_a_two_node_two_process_ddp_job_trains_on_the_real_node(
        tmp_path: Path, cluster: Cluster, real_node: RealNode, api: client.ApiClient, namespace: str) -> None:
    args = real_job(namespace, script="examples/ddp_digits.py", workers=2, num_proc=2,
                    args=["--epochs", "3", "--checkpoint", "/tmp/ddp_digits.pt"])
    started = time.monotonic()
    engine, _ = up(tmp_path, cluster, "digits", args)
    deployed = time.monotonic()
    wait_for(lambda: any("[rank " in log_so_far(api, pod, namespace) for pod in job_pods(api, "digits", namespace)
                         .values()), WAIT, "a rank of job digits to print")
    print(f"\n2x2 ddp_digits: pulumi up {deployed - started:.1f} s, up to the first rank's output "
          f"{time.monotonic() - started:.1f} s")  # measured, never asserted (issue 22 item 3)
    condition = job_end(api, "digits", namespace)
    logs = pod_logs(api, "digits", namespace)
    assert condition["type"] == "Complete", shown(condition, logs)
    assert any("held-out accuracy" in log and "world size 4" in log for log in logs.values()), logs
    engine.run("destroy", "--yes")


def test_an_elastic_job_that_loses_a_pod_goes_on_and_completes_with_its_replacement(
        tmp_path: Path, cluster: Cluster, real_node: RealNode, api: client.ApiClient, namespace: str) -> None:
    """``kubectl delete pod`` of node 1's pod while the job trains: its agent leaves (SIGTERM), node 0's ranks go
    on at world size 2 from the last checkpoint (in ``/record``, a hostPath every pod of the one real node
    shares), and the Job completes with the accuracy line, at the smaller size or with the Job controller's
    replacement for index 1 joined (its cold ranks met by the survivors' rendezvous:
    ``runtime.agent.execution.torchhooks``), whichever the timing gives: on 2026-12-02 the survivors finished
    first. Before that fix the survivors' ``init_process_group`` gave up waiting for the replacement and the
    job failed with 121."""
    record = tmp_path / "record"
    record.mkdir()
    args = real_job(namespace, record, script="examples/elastic_digits.py", workers=2, num_proc=2,
                    min_workers=1, max_workers=2,
                    args=["--epochs", "25", "--checkpoint", "/record/elastic.pt"])
    engine, _ = up(tmp_path, cluster, "elastic", args)

    def training_pod() -> str | None:
        pods = job_pods(api, "elastic", namespace)
        if "0" not in pods or "1" not in pods:
            return None
        return pods["1"] if "epoch 2/25" in log_so_far(api, pods["0"], namespace) else None

    victim = wait_for(training_pod, WAIT, "job elastic to train two epochs")
    client.CoreV1Api(api).delete_namespaced_pod(victim, namespace)
    condition = job_end(api, "elastic", namespace)
    logs = pod_logs(api, "elastic", namespace)
    joined = "\n".join(logs.values())
    assert condition["type"] == "Complete", shown(condition, logs)
    assert victim not in logs, logs
    assert "world size 2" in joined, "the survivors went on without node 1's ranks"
    assert "job succeeded" in logs[min(logs)], logs
    assert "held-out accuracy" in joined, logs
    engine.run("destroy", "--yes")


def test_a_rank_that_exits_5_fails_the_job_with_the_controllers_reason_and_the_agents_root_cause(
        tmp_path: Path, cluster: Cluster, real_node: RealNode, api: client.ApiClient, namespace: str) -> None:
    code = "import os, sys, time; rank = int(os.environ['RANK']); print('rank', rank, flush=True); " \
           "time.sleep(1); sys.exit(5 if rank == 3 else 0)"
    args = real_job(namespace, command=["python3", "-c", code], workers=2, num_proc=2)
    engine, _ = up(tmp_path, cluster, "fails", args)
    condition = job_end(api, "fails", namespace)
    logs = pod_logs(api, "fails", namespace)
    assert condition["type"] == "Failed", shown(condition, logs)
    assert condition["reason"] in ("PodFailurePolicy", "BackoffLimitExceeded"), condition
    root_cause = re.compile(r"job failed: rank 3 \(node 1 at [^,]+, local rank 1\) exited with code 5$", re.M)
    assert any(root_cause.search(log) for log in logs.values()), logs
    engine.run("destroy", "--yes")


RECORDER = """
import os, signal, time
pod, rank = os.environ[{pod_env!r}], os.environ["RANK"]
out = open(f"/record/{{pod}}-{{rank}}", "a", buffering=1)
signal.signal(signal.SIGTERM, lambda *_: out.write(f"sigterm {{time.time()}}\\n"))
out.write(f"start {{time.time()}}\\n")
while True:
    out.write(f"alive {{time.time()}}\\n")
    time.sleep(0.05)
"""
"""A rank that records its start, every SIGTERM it gets (and ignores) and, every 50 ms, that it is alive, into
``/record/<pod>-<rank>`` (a hostPath directory of the test)."""


def records(directory: Path, pod: str) -> dict[str, list[tuple[str, float]]]:
    """Each rank's records (event, time) of pod ``pod``, by the rank's file name."""
    out = {}
    for path in sorted(directory.glob(f"{pod}-*")):
        out[path.name] = [(event, float(at)) for event, at in (line.split() for line in path.read_text().splitlines()
                                                               if len(line.split()) == 2)]
    return out


def test_a_pod_deleted_with_its_grace_period_gets_sigterm_in_every_rank_then_sigkill(
        tmp_path: Path, cluster: Cluster, real_node: RealNode, api: client.ApiClient, namespace: str) -> None:
    record = tmp_path / "record"
    record.mkdir()
    grace = 3.0
    args = real_job(namespace, record, command=["python3", "-c", RECORDER.format(pod_env=contract.POD_NAME)],
                    workers=1, num_proc=2, grace_period=grace)
    up(tmp_path, cluster, "graceful", args)
    core = client.CoreV1Api(api)

    def started() -> str | None:
        for pod in core.list_namespaced_pod(namespace, label_selector="job-name=graceful").to_dict()["items"]:
            ranks = records(record, pod["metadata"]["name"])
            if len(ranks) == 2 and all(r for r in ranks.values()):
                return str(pod["metadata"]["name"])
        return None

    pod = wait_for(started, WAIT, "both ranks of job graceful to start")
    core.delete_namespaced_pod(pod, namespace)  # with the pod's own terminationGracePeriodSeconds
    wait_for(lambda: not any(p["metadata"]["name"] == pod for p in
                             core.list_namespaced_pod(namespace).to_dict()["items"]), WAIT, f"pod {pod} to go")
    ranks = records(record, pod)
    assert sorted(ranks) == [f"{pod}-0", f"{pod}-1"], ranks
    for name, events in ranks.items():
        terms = [at for event, at in events if event == "sigterm"]
        assert len(terms) == 1, (name, events[-5:])  # one SIGTERM, passed on by the agent
        last_alive = max(at for event, at in events if event == "alive")
        # it ignored SIGTERM and lived on until the agent's SIGKILL, grace seconds later
        assert grace - 0.5 <= last_alive - terms[0] <= grace + 2.0, (name, terms, last_alive)
