"""A job's storage against the real API server, controller manager and kubelet (issue 23, item 1): claims bind
(the test cluster's host-path provisioner, ``testbed/cluster/storage.py``), the pods on the real node
(``testbed/cluster/realnode.py``) mount them where the job says, and what a rank writes to ``checkpoint_dir``
outlives its pod and its job.

Each claim is a directory of this machine (the PersistentVolume's ``hostPath``), which the test reads directly to
see what the pods wrote. Jobs are deployed with ``pulumi up`` as in ``test_real_jobs.py``.

Both tests passed on 2026-12-02 (the real node, the ``hostpath`` class). The ``real_node`` fixture builds the
``pods`` part when it is not cached (CI builds it beforehand); the real node is one per machine (its bridge
``tpnode0`` is deleted and made again at start), so no other session may use the real node meanwhile.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch
from kubernetes import client

from components.job.volumes import CHECKPOINT_DIR_ENV
from runtime.agent import contract
from testbed.cluster import storage
from testbed.cluster.lifecycle import Cluster
from testbed.cluster.realnode import RealNode
from testbed.cluster.waiting import wait_for
from tests.cluster.test_real_jobs import WAIT, job_end, pod_logs, real_job, up

pytestmark = pytest.mark.cluster

BIND = 60.0
"""Seconds a claim of the host-path class may take to bind (the PV controller's resync is 15 s)."""


def claim_spec(size: str = "1Gi") -> dict[str, Any]:
    """A ReadWriteMany claim's spec of the cluster's host-path class."""
    return {"accessModes": ["ReadWriteMany"], "storageClassName": storage.CLASS,
            "resources": {"requests": {"storage": size}}}


def bound_path(api: client.ApiClient, name: str, namespace: str) -> Path | None:
    """The directory on this machine of claim ``name`` once it is Bound, else ``None``."""
    core = client.CoreV1Api(api)
    claim = core.read_namespaced_persistent_volume_claim(name, namespace)
    if claim.status.phase != "Bound":
        return None
    volume = core.read_persistent_volume(claim.spec.volume_name)
    assert volume.spec.host_path.path.startswith(storage.ROOT + "/"), volume.spec
    assert volume.spec.access_modes == ["ReadWriteMany"], volume.spec
    return Path(volume.spec.host_path.path)


def test_claims_bind_every_pod_mounts_them_and_the_checkpoint_outlives_the_job(
        tmp_path: Path, cluster: Cluster, real_node: RealNode, api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_persistent_volume_claim(namespace, {"metadata": {"name": "results"}, "spec": claim_spec()})
    results = wait_for(lambda: bound_path(api, "results", namespace), BIND, "claim results to bind")
    # a 2-node job: the existing claim by name at /results, where each rank writes its parameters' fingerprint;
    # the claim the job creates as its checkpoint dir, where rank 0 saves the model (the example's default
    # --checkpoint is $CHECKPOINT_DIR/ddp_digits.pt)
    args = real_job(namespace, script="examples/ddp_digits.py", workers=2, num_proc=1,
                    args=["--epochs", "3", "--params-out", "/results"],
                    claims=[{"metadata": {"name": "checkpoints"}, "spec": claim_spec()}],
                    checkpoint_dir="/checkpoints", checkpoint_claim="checkpoints")
    args = dataclasses.replace(
        args, volumes=[*args.volumes, {"name": "results", "persistentVolumeClaim": {"claimName": "results"}}],
        volume_mounts=[*args.volume_mounts, {"name": "results", "mountPath": "/results"}])
    engine, _ = up(tmp_path / "train", cluster, "digits", args)
    checkpoints = wait_for(lambda: bound_path(api, "checkpoints", namespace), BIND, "claim checkpoints to bind")
    condition = job_end(api, "digits", namespace)
    logs = pod_logs(api, "digits", namespace)
    assert condition["type"] == "Complete", (condition, logs)
    pods = core.list_namespaced_pod(namespace, label_selector="job-name=digits").items
    assert {p.spec.node_name for p in pods} == {"real-0"} and len(pods) == 2, [p.metadata.name for p in pods]

    fingerprints = {p.name: p.read_text() for p in results.iterdir()}
    assert sorted(fingerprints) == ["rank-0.json", "rank-1.json"], fingerprints  # both pods wrote to one claim
    saved = torch.load(checkpoints / "ddp_digits.pt", weights_only=True)
    assert saved["epochs"] == 3, saved.keys()
    assert any(f"held-out accuracy {saved['accuracy']:.4f}" in log for log in logs.values()), logs

    # a second job mounts the first one's claim by name and finds the checkpoint where CHECKPOINT_DIR says
    reader = ("import os, torch; d = os.environ[" + repr(CHECKPOINT_DIR_ENV) + "]; "
              "c = torch.load(os.path.join(d, 'ddp_digits.pt'), weights_only=True); "
              "print('restored from', d, 'epochs', c['epochs'], 'accuracy', round(c['accuracy'], 4), flush=True)")
    second = real_job(namespace, command=["python3", "-c", reader], workers=1, num_proc=1,
                      checkpoint_dir="/restore", checkpoint_claim="checkpoints")
    reader_engine, _ = up(tmp_path / "read", cluster, "reader", second)
    condition = job_end(api, "reader", namespace)
    logs = pod_logs(api, "reader", namespace)
    assert condition["type"] == "Complete", (condition, logs)
    restored = f"restored from /restore epochs 3 accuracy {round(saved['accuracy'], 4)}"
    assert any(restored in log for log in logs.values()), (restored, logs)
    reader_engine.run("destroy", "--yes")

    # the claim the job created goes with its stack, and the provisioner removes its directory
    engine.run("destroy", "--yes")
    wait_for(lambda: not checkpoints.exists(), BIND, f"the checkpoints volume's directory {checkpoints} to go")
    assert results.exists()  # the existing claim is not the job's


SAVER = """
import os, sys, time
path, pod = os.path.join(os.environ[{env!r}], "state"), os.environ[{pod_env!r}]
if os.path.exists(path):
    print("resumed", open(path).read(), "in", pod, flush=True)
    sys.exit(0)
with open(path + ".tmp", "w") as out:
    out.write(pod)
os.replace(path + ".tmp", path)
print("saved in", pod, flush=True)
time.sleep(3600)
"""
"""A rank that resumes from ``$CHECKPOINT_DIR/state`` when it is there (and exits 0), else saves its pod's name
there and waits to be stopped."""


def test_an_evicted_pods_replacement_resumes_from_the_checkpoint_its_rank_saved(
        tmp_path: Path, cluster: Cluster, real_node: RealNode, api: client.ApiClient, namespace: str) -> None:
    saver = SAVER.format(env=CHECKPOINT_DIR_ENV, pod_env=contract.POD_NAME)
    args = real_job(namespace, command=["python3", "-c", saver], workers=1, num_proc=1, grace_period=2.0,
                    claims=[{"metadata": {"name": "state"}, "spec": claim_spec()}],
                    checkpoint_dir="/checkpoints", checkpoint_claim="state")
    engine, _ = up(tmp_path, cluster, "resume", args)
    directory = wait_for(lambda: bound_path(api, "state", namespace), BIND, "claim state to bind")
    first = wait_for(lambda: (directory / "state").exists() and (directory / "state").read_text(), WAIT,
                     "rank 0 to save its state")
    core = client.CoreV1Api(api)
    core.create_namespaced_pod_eviction(first, namespace, {"metadata": {"name": first, "namespace": namespace}})
    condition = job_end(api, "resume", namespace)
    logs = pod_logs(api, "resume", namespace)
    assert condition["type"] == "Complete", (condition, logs)
    replacements = [name for name in logs if name != first]
    assert len(replacements) == 1, logs
    assert f"resumed {first} in {replacements[0]}" in logs[replacements[0]], logs
    engine.run("destroy", "--yes")
