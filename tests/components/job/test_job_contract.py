"""Contract tests: the component's rendered pods, run as local processes with the real agent, train DDP.

Each workload comes from a 2-node batch ``DistributedJob`` under Pulumi mocks. Its runtime ConfigMap is
materialised through the volume's ``items`` into a stand-in for the mount path, and each "pod" runs
the container's exact command and env. Only what Kubernetes (and, for a PyTorchJob, the Kubeflow
training operator) would supply is filled in: the downward-API values (its own loopback address as
``POD_IP``), the Secret, the controller's env (``JOB_COMPLETION_INDEX``, or the operator's
``MASTER_ADDR``/``RANK``/...), and DNS through the agent's resolver seam ``TRAINPLANE_RESOLVE``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from components import DistributedJob
from components.job.bundle import materialise
from runtime.agent import contract
from runtime.agent.spec.ports import reserved_ports
from runtime.local.launch_plan import free_port
from tests.components.componenttest import REPO_ROOT, deploy, job_args, unsecret

pytestmark = pytest.mark.process

JOB = "ddp"
NAMESPACE = "training"
WORKERS = 2
NUM_PROC = 2
EXAMPLE = REPO_ROOT / "examples" / "ddp_digits.py"
RUN_TIMEOUT = 300.0
OPERATOR_CONTAINER = "pytorch"
"""``PytorchJobDefaultContainerName``: the only container the operator configures."""
OPERATOR_PORT_NAME = "pytorchjob-port"
"""``PytorchJobDefaultPortName``: the Master's container port the operator takes ``MASTER_PORT`` from."""


def render_objects(tmp_path: Path, pod_ips: Sequence[str], **overrides: Any) -> dict[str, dict[str, Any]]:
    """The job's objects by kind, as the engine received them (secrets unwrapped).

    The image's working directory holds the example and nothing else; by default the job runs the
    example, which writes its per-rank parameter fingerprints under ``tmp_path / "out"``;
    ``overrides`` may replace the program (``script``, ``command``, ``args``) and any other argument.
    """
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    shutil.copy(EXAMPLE, workspace / EXAMPLE.name)
    out = tmp_path / "out"
    master_port = free_port(pod_ips[0])
    settings: dict[str, Any] = {
        "script": EXAMPLE.name,
        "args": ["--epochs", "30", "--params-out", str(out / "params"), "--checkpoint", str(out / "ckpt.pt")],
        "workers": WORKERS,
        "num_proc": NUM_PROC,
        "namespace": NAMESPACE,
        "working_dir": str(workspace),
        "agent_port": free_port(pod_ips[0], range(master_port, master_port + reserved_ports(WORKERS * NUM_PROC))),
        "master_port": master_port,
        "quorum_timeout": 120,
        "env": {"OMP_NUM_THREADS": "1"},
    }
    args = job_args(**{**settings, **overrides})
    result = deploy(lambda: {"name": DistributedJob(JOB, args).job_name})
    return {r.inputs["kind"]: unsecret(r.inputs) for r in result.registrations.values() if "kind" in r.inputs}


def mount_configmaps(pod: dict[str, Any], container: dict[str, Any], configmaps: dict[str, Any], root: Path) -> dict:
    """Materialise every ConfigMap volume the container mounts; returns mount path -> local directory."""
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    mounts = {}
    for mount in container["volumeMounts"]:
        source = volumes[mount["name"]].get("configMap")
        if source is None:
            continue
        local = root / mount["name"]
        materialise(configmaps[source["name"]]["data"], source["items"], local)
        mounts[mount["mountPath"]] = str(local)
    return mounts


def pod_env(container: dict[str, Any], fields: dict[str, str], secrets: dict[str, Any]) -> dict[str, str]:
    """The container's env with downward-API and Secret references resolved the way the kubelet would."""
    env = {}
    for var in container["env"]:
        if "value" in var:
            env[var["name"]] = var["value"]
        elif "fieldRef" in var["valueFrom"]:
            env[var["name"]] = fields[var["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            ref = var["valueFrom"]["secretKeyRef"]
            env[var["name"]] = secrets[ref["name"]]["stringData"][ref["key"]]
    return env


def kubelet_env(
    objects: dict[str, dict[str, Any]], pod: dict[str, Any], container: dict[str, Any], name: str, ip: str, root: Path,
    labels: Mapping[str, str] = MappingProxyType({}),
) -> dict[str, str]:
    """What pod ``name`` at ``ip`` would run with: its resolved env, the bundle mounted under ``root``.

    Mount paths in the env point at the local stand-ins; ``PATH`` finds this interpreter as
    ``python3``; ``HOME`` and ``HOSTNAME`` are the pod's own. ``labels`` are the labels a controller
    puts on the pod beyond the template's, readable through the downward API.
    """
    configmaps = {objects["ConfigMap"]["metadata"]["name"]: objects["ConfigMap"]}
    secrets = {objects["Secret"]["metadata"]["name"]: objects["Secret"]}
    mounts = mount_configmaps(pod, container, configmaps, root / name)
    assert contract.BUNDLE_MOUNT_PATH in mounts
    fields = {"status.podIP": ip, "metadata.name": name, "metadata.namespace": NAMESPACE}
    fields.update({f"metadata.labels['{key}']": value for key, value in labels.items()})
    env = {k: mounts.get(v, v) for k, v in pod_env(container, fields, secrets).items()}
    env.update({"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(root), "HOSTNAME": name})
    return env


def run_pods(pods: Sequence[tuple[dict[str, Any], dict[str, str]]]) -> list[tuple[int, str]]:
    """Run each ``(container, env)`` as a process with the container's command and working directory.

    Returns:
        Each pod's exit code and combined output, in order.
    """
    procs = [
        subprocess.Popen(
            container["command"], env=env, cwd=container["workingDir"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        for container, env in pods
    ]
    results = []
    try:
        for proc in procs:
            output = proc.communicate(timeout=RUN_TIMEOUT)[0]
            results.append((proc.returncode, output))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return results


def assert_trained(tmp_path: Path, results: list[tuple[int, str]]) -> None:
    """Every pod exited 0, every rank reported, all hold the same model, and it is accurate."""
    assert [code for code, _ in results] == [0] * WORKERS, "\n".join(output for _, output in results)
    reports = [json.loads(p.read_text()) for p in sorted((tmp_path / "out" / "params").glob("rank-*.json"))]
    assert sorted(r["rank"] for r in reports) == list(range(WORKERS * NUM_PROC))
    assert {r["world_size"] for r in reports} == {WORKERS * NUM_PROC}
    assert len({r["params"] for r in reports}) == 1, "every rank must hold the same model"
    assert min(r["accuracy"] for r in reports) >= 0.90


def operator_env(job: dict[str, Any], replica_type: str, index: int) -> dict[str, str]:
    """The env the Kubeflow training operator v1.9 appends to a non-elastic PyTorchJob replica's container.

    Transcribed from kubeflow/training-operator (now kubeflow/trainer) v1.9,
    ``pkg/controller.v1/pytorch/envvar.go`` (``setPodEnv``) and ``master.go``
    (``MasterEnvVarGenerator``), in the order they are appended:
    ``PYTHONUNBUFFERED=1`` (1 since PR #1860); ``MASTER_PORT``, the Master's ``pytorchjob-port``
    container port; ``MASTER_ADDR``, ``<job>-master-0``, the Master replica's Service; their
    ``PET_MASTER_PORT``/``PET_MASTER_ADDR`` copies; ``WORLD_SIZE`` = total replicas x the integer
    value of ``nprocPerNode`` (1 if it is not an integer; PR #1840); ``RANK``, the replica index for
    the Master and index + 1 for a Worker; ``PET_NPROC_PER_NODE`` = ``nprocPerNode``;
    ``PET_NODE_RANK`` = ``RANK``; and, without an ``elasticPolicy``, ``PET_NNODES`` = total replicas.
    Numbers in ``job`` may be floats: custom resource inputs reach the mocks as untyped JSON.
    """
    name, spec = job["metadata"]["name"], job["spec"]
    replicas = spec["pytorchReplicaSpecs"]
    master = next(c for c in replicas["Master"]["template"]["spec"]["containers"] if c["name"] == OPERATOR_CONTAINER)
    port = str(next(int(p["containerPort"]) for p in master["ports"] if p["name"] == OPERATOR_PORT_NAME))
    total = sum(int(r["replicas"]) for r in replicas.values())
    nproc = spec["nprocPerNode"]
    rank = str(index + 1 if replica_type == "Worker" else index)
    master_addr = f"{name}-master-0"
    return {
        "PYTHONUNBUFFERED": "1",
        "MASTER_PORT": port,
        "MASTER_ADDR": master_addr,
        "PET_MASTER_PORT": port,
        "PET_MASTER_ADDR": master_addr,
        "WORLD_SIZE": str(total * (int(nproc) if nproc.isdigit() else 1)),
        "RANK": rank,
        "PET_NPROC_PER_NODE": nproc,
        "PET_NODE_RANK": rank,
        "PET_NNODES": str(total),
    }


def elastic_operator_env(job: dict[str, Any]) -> dict[str, str]:
    """The env the Kubeflow training operator v1.9 appends to every replica of an elastic, Worker-only
    PyTorchJob (the same for each replica: a replica learns its index only from its labels).

    Transcribed from kubeflow/training-operator v1.9, ``pkg/controller.v1/pytorch/envvar.go``
    (``setPodEnv``) and ``elastic.go`` (``ElasticEnvVarGenerator``), in the order they are appended:
    ``PYTHONUNBUFFERED=1``; nothing from the Master block (no Master: no ``MASTER_ADDR``,
    ``MASTER_PORT``, ``WORLD_SIZE``, ``RANK``, ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK``); then
    ``PET_RDZV_ENDPOINT`` = ``<rdzvHost, default <job>-worker-0>:<rdzvPort, default the Worker's
    pytorchjob-port>``; ``PET_RDZV_BACKEND`` = ``rdzvBackend``, default ``c10d``; ``PET_NNODES`` =
    ``"<minReplicas>:<maxReplicas>"``; ``PET_MAX_RESTARTS`` = ``maxRestarts`` when set. The policy
    fields behind ``PET_NPROC_PER_NODE``, ``PET_RDZV_ID``, ``PET_RDZV_CONF`` and ``PET_STANDALONE``
    are not rendered, so those are absent.
    """
    name, spec = job["metadata"]["name"], job["spec"]
    policy = spec["elasticPolicy"]
    worker = next(c for c in spec["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
                  if c["name"] == OPERATOR_CONTAINER)
    port = next(int(p["containerPort"]) for p in worker["ports"] if p["name"] == OPERATOR_PORT_NAME)
    assert not {"rdzvHost", "rdzvPort", "rdzvBackend", "nProcPerNode", "rdzvId", "rdzvConf", "standalone"} & set(policy)
    return {
        "PYTHONUNBUFFERED": "1",
        "PET_RDZV_ENDPOINT": f"{name}-worker-0:{port}",
        "PET_RDZV_BACKEND": "c10d",
        "PET_NNODES": f"{int(policy['minReplicas'])}:{int(policy['maxReplicas'])}",
        "PET_MAX_RESTARTS": str(int(policy["maxRestarts"])),
    }


def indexed_job_pods(
    tmp_path: Path, objects: dict[str, dict[str, Any]], pod_ips: Sequence[str]
) -> list[tuple[dict[str, Any], dict[str, str]]]:
    """The Indexed Job's pods, one per address: container and the env the Job controller and kubelet give it."""
    job = objects["Job"]
    pod = job["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert job["spec"]["completions"] == len(pod_ips)
    job_name = job["metadata"]["name"]
    hosts = {f"{job_name}-{i}.{pod['spec']['subdomain']}": ip for i, ip in enumerate(pod_ips)}
    pods = []
    for index, ip in enumerate(pod_ips):
        env = kubelet_env(objects, pod, container, f"{job_name}-{index}-x7k2p", ip, tmp_path / "pods")
        env.update({
            contract.JOB_COMPLETION_INDEX: str(index),  # set by the Indexed Job controller
            contract.RESOLVE: json.dumps(hosts),  # pod DNS of the headless Service
            "HOSTNAME": f"{job_name}-{index}",
        })
        pods.append((container, env))
    return pods


@pytest.mark.timeout(RUN_TIMEOUT + 60)
def test_rendered_indexed_job_pods_run_ddp_with_the_real_agent(tmp_path: Path) -> None:
    pod_ips = ("127.0.0.41", "127.0.0.42")
    objects = render_objects(tmp_path, pod_ips)
    assert_trained(tmp_path, run_pods(indexed_job_pods(tmp_path, objects, pod_ips)))


@pytest.mark.timeout(RUN_TIMEOUT + 60)
def test_rendered_pods_run_a_command_without_python_under_the_env_contract(tmp_path: Path) -> None:
    pod_ips = ("127.0.0.45", "127.0.0.46")
    out = tmp_path / "ranks"
    out.mkdir()
    report = 'echo "$WORLD_SIZE $NODE_RANK $LOCAL_RANK $MASTER_ADDR" > "$0/rank-$RANK"'
    objects = render_objects(tmp_path, pod_ips, script=None, command=["sh", "-c", report], args=[str(out)])
    results = run_pods(indexed_job_pods(tmp_path, objects, pod_ips))
    assert [code for code, _ in results] == [0] * WORKERS, "\n".join(output for _, output in results)
    ranks = {p.name: p.read_text().split() for p in out.iterdir()}
    assert ranks == {
        f"rank-{rank}": [str(WORKERS * NUM_PROC), str(rank // NUM_PROC), str(rank % NUM_PROC), pod_ips[0]]
        for rank in range(WORKERS * NUM_PROC)
    }


@pytest.mark.timeout(RUN_TIMEOUT + 60)
def test_rendered_pytorchjob_pods_run_ddp_under_the_operator_env(tmp_path: Path) -> None:
    pod_ips = ("127.0.0.51", "127.0.0.52")
    objects = render_objects(tmp_path, pod_ips, backend="pytorchjob")
    job = objects["PyTorchJob"]
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert {kind: r["replicas"] for kind, r in replicas.items()} == {"Master": 1, "Worker": WORKERS - 1}
    assert "elasticPolicy" not in job["spec"]

    job_name = job["metadata"]["name"]
    # The operator names each pod, and the Service in front of it, <job>-<replica type>-<index>.
    members = [(kind, i, f"{job_name}-{kind.lower()}-{i}") for kind in ("Master", "Worker")
               for i in range(int(replicas[kind]["replicas"]))]
    hosts = {pod_name: ip for (_, _, pod_name), ip in zip(members, pod_ips)}
    pods = []
    for (kind, index, pod_name), ip in zip(members, pod_ips):
        pod = replicas[kind]["template"]
        (container,) = pod["spec"]["containers"]
        assert container["name"] == OPERATOR_CONTAINER
        env = kubelet_env(objects, pod, container, pod_name, ip, tmp_path / "pods")
        env.update(operator_env(job, kind, index))  # appended after the template's env: it wins
        env[contract.RESOLVE] = json.dumps(hosts)  # the operator's per-replica Services
        pods.append((container, env))
    assert_trained(tmp_path, run_pods(pods))


@pytest.mark.timeout(RUN_TIMEOUT + 60)
def test_rendered_elastic_pytorchjob_worker_pods_run_ddp_under_the_operator_env(tmp_path: Path) -> None:
    pod_ips = ("127.0.0.61", "127.0.0.62")
    objects = render_objects(tmp_path, pod_ips, backend="pytorchjob", min_workers=1, max_workers=4)
    job = objects["PyTorchJob"]
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert {kind: r["replicas"] for kind, r in replicas.items()} == {"Worker": WORKERS}
    pod = replicas["Worker"]["template"]
    (container,) = pod["spec"]["containers"]
    assert container["name"] == OPERATOR_CONTAINER
    operator = elastic_operator_env(job)
    master_port = next(v["value"] for v in container["env"] if v["name"] == contract.MASTER_PORT)
    assert operator["PET_RDZV_ENDPOINT"] == f"{JOB}-worker-0:{master_port}", "the operator's and ours agree"
    assert operator["PET_NNODES"] == "1:4"
    # No Master: the operator sets no MASTER_ADDR/RANK, so node 0 is <job>-worker-0, the node rank the
    # replica-index label the operator puts on each pod, and each operator Service names one pod.
    hosts = {f"{JOB}-worker-{i}": ip for i, ip in enumerate(pod_ips)}
    pods = []
    for index, ip in enumerate(pod_ips):
        labels = {"training.kubeflow.org/replica-type": "worker", "training.kubeflow.org/replica-index": str(index)}
        env = kubelet_env(objects, pod, container, f"{JOB}-worker-{index}", ip, tmp_path / "pods", labels)
        env.update(operator)  # appended after the template's env: it wins
        assert not {contract.MASTER_ADDR, contract.RANK, contract.WORLD_SIZE} & set(env)
        env[contract.RESOLVE] = json.dumps(hosts)
        pods.append((container, env))
    assert_trained(tmp_path, run_pods(pods))
