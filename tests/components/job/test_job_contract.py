"""Contract test: the component's rendered pods, run as local processes with the real agent, train DDP.

The pod template comes from a 2-worker batch ``DistributedJob`` under Pulumi mocks. Its runtime
ConfigMap is materialised through the volume's ``items`` into the stand-in for the mount path, and each
"pod" runs the container's exact command and env. Only what Kubernetes would supply is filled in: the
downward-API values (its own loopback address as ``POD_IP``), the Secret, ``JOB_COMPLETION_INDEX``,
and pod DNS (``<job>-<index>.<subdomain>``) through the agent's resolver seam ``TRAINPLANE_RESOLVE``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from components import DistributedJob
from components.job.bundle import materialise
from runtime.agent import contract
from runtime.launch import free_port
from tests.components.componenttest import REPO_ROOT, Deployment, deploy, job_args, unsecret

JOB = "ddp"
NAMESPACE = "training"
WORKERS = 2
NUM_PROC = 2
POD_IPS = ("127.0.0.41", "127.0.0.42")
EXAMPLE = REPO_ROOT / "examples" / "ddp_digits.py"
RUN_TIMEOUT = 300.0


def render_pods(workspace: Path, out: Path) -> Deployment:
    """The job under mocks; the image's working directory holds the example, nothing else."""
    master_port = free_port(POD_IPS[0])
    args = job_args(
        script=EXAMPLE.name,
        args=["--epochs", "30", "--params-out", str(out / "params"), "--checkpoint", str(out / "ckpt.pt")],
        workers=WORKERS,
        num_proc=NUM_PROC,
        namespace=NAMESPACE,
        working_dir=str(workspace),
        agent_port=free_port(POD_IPS[0], [master_port]),
        master_port=master_port,
        quorum_timeout=120,
        env={"OMP_NUM_THREADS": "1"},
    )
    return deploy(lambda: {"name": DistributedJob(JOB, args).job_name})


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


@pytest.mark.timeout(RUN_TIMEOUT + 60)
def test_rendered_pods_run_ddp_with_the_real_agent(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    shutil.copy(EXAMPLE, workspace / EXAMPLE.name)
    out = tmp_path / "out"
    result = render_pods(workspace, out)

    objects = {r.inputs["kind"]: unsecret(r.inputs) for r in result.registrations.values() if "kind" in r.inputs}
    configmaps = {objects["ConfigMap"]["metadata"]["name"]: objects["ConfigMap"]}
    secrets = {objects["Secret"]["metadata"]["name"]: objects["Secret"]}
    job = objects["Job"]
    pod = job["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert job["spec"]["completions"] == WORKERS
    mounts = mount_configmaps(pod, container, configmaps, tmp_path / "mounts")
    assert contract.BUNDLE_MOUNT_PATH in mounts

    job_name = job["metadata"]["name"]
    hosts = {f"{job_name}-{i}.{pod['spec']['subdomain']}": ip for i, ip in enumerate(POD_IPS)}
    procs = []
    for index, ip in enumerate(POD_IPS):
        fields = {"status.podIP": ip, "metadata.name": f"{job_name}-{index}-x7k2p", "metadata.namespace": NAMESPACE}
        env = pod_env(container, fields, secrets)
        env = {k: mounts.get(v, v) for k, v in env.items()}  # the bundle's mount path, materialised locally
        env.update({
            contract.JOB_COMPLETION_INDEX: str(index),  # set by the Indexed Job controller
            contract.RESOLVE: json.dumps(hosts),  # pod DNS of the headless Service
            "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
            "HOME": str(tmp_path),
            "HOSTNAME": f"{job_name}-{index}",
        })
        procs.append(subprocess.Popen(
            container["command"], env=env, cwd=container["workingDir"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        ))
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=RUN_TIMEOUT)[0])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    assert [p.returncode for p in procs] == [0, 0], "\n".join(outputs)
    reports = [json.loads(p.read_text()) for p in sorted((out / "params").glob("rank-*.json"))]
    assert sorted(r["rank"] for r in reports) == list(range(WORKERS * NUM_PROC))
    assert {r["world_size"] for r in reports} == {WORKERS * NUM_PROC}
    assert len({r["params"] for r in reports}) == 1, "every rank must hold the same model"
    assert min(r["accuracy"] for r in reports) >= 0.90
