"""A stack the API server refuses fails ``pulumi up`` with the server's message, and a second ``up`` after the
fix converges, through the real engine, the Python language host and the real ``DistributedJob``.

One program, one stack, two refusals in the order a team meets them, then convergence:

- the team's namespace has a storage quota (a ResourceQuota of ``requests.storage: 10Gi``) and the job's
  claim asks for more: the API server refuses the claim with its own message (``persistentvolumeclaims
  "checkpoints" is forbidden: exceeded quota: storage, requested: requests.storage=20Gi, ...``, the
  ResourceQuota admission plugin's), and the workload, created after it, is not attempted;
- the claim made smaller, the job (``backend="pytorchjob"``) needs the PyTorchJob CRD, which no add-on
  installed: the claim is created, the PyTorchJob is refused, and the output says why (the kubernetes
  provider's sentence around the API's own ``no matches for kind "PyTorchJob" in version "kubeflow.org/v1"``,
  from the server's discovery: it serves no such kind). The provider retries that create five times with
  growing pauses first (pulumi-kubernetes provider/v4 at the pinned commit, ``pkg/await/await.go``,
  ``Creation``: a NotFound or NoMatch error is retried, so a CRD or namespace made by the same program a
  moment later is waited for), which takes most of this test's time;
- the CRD applied (the one ``python -m testbed.cluster build`` generates), ``up`` converges: every object the
  job renders exists in the API (read with the ``kubernetes`` client), and a preview plans no change.

An immutable field is not among the refusals: an edit the server would refuse is a replacement before it
reaches the server. The component replaces a Job on every field ``validateJobSpecUpdate`` makes immutable
and a PyTorchJob on any spec change (``components/job/render.py``, ``REPLACED_ON``), and the kubernetes
provider replaces a StatefulSet whose selector, service name, pod management policy or claim templates
change and a Service whose ``clusterIP`` does (its ``forceNew`` paths: pulumi-kubernetes provider/v4 at the
pinned commit, ``pkg/provider/diff.go``); ``tests/cluster/test_engine.py`` shows an image edit replacing the
Job once. So the first refusal here is a quota.
"""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from components.job.bundle import build_bundle
from components.job.render import RenderedJob, render_job
from testbed.cluster import crds
from testbed.cluster.engine import Engine
from testbed.cluster.lifecycle import Cluster
from testbed.cluster.project import cluster_stack, copy_project
from testbed.cluster.waiting import wait_for
from tests.cluster.kube import WAIT, apply_crd, delete_crd, live
from tests.components.componenttest import TOKEN, job_args

pytestmark = pytest.mark.cluster

PROGRAM = textwrap.dedent('''
    import os

    import pulumi
    import pulumi_kubernetes as k8s

    from components.job import DistributedJob, DistributedJobArgs

    provider = k8s.Provider("cluster", kubeconfig=open(os.environ["KUBECONFIG"]).read())
    size = os.environ["CLAIM_SIZE"]
    claim = {"metadata": {"name": "checkpoints"},
             "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}}
    job = DistributedJob("trainer", DistributedJobArgs(image="python:3.11-slim", workers=2, num_proc=1,
                                                       script="train.py", backend="pytorchjob", claims=[claim],
                                                       namespace=os.environ["JOB_NAMESPACE"]),
                         opts=pulumi.ResourceOptions(provider=provider))
    pulumi.export("job", job.job_name)
''')
PYTORCHJOB_CRD = "kubeflow.org_pytorchjobs.yaml"
QUOTA = "10Gi"


def rendered(namespace: str, claim_size: str) -> RenderedJob:
    """What ``PROGRAM`` registers (the token aside, which no name depends on)."""
    claim = {"metadata": {"name": "checkpoints"},
             "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": claim_size}}}}
    args = job_args(namespace=namespace, workers=2, num_proc=1, backend="pytorchjob", claims=[claim])
    return render_job("trainer", args, TOKEN, build_bundle())


def existing(api: client.ApiClient, job: RenderedJob) -> list[str]:
    """The roles of ``job``'s objects the API server holds now (none of a kind it does not serve)."""
    def held(body: dict[str, Any]) -> bool:
        try:
            return live(api, body) is not None
        except ResourceNotFoundError:
            return False

    return [m.role for m in job.manifests if held(m.body)]


def storage_quota(api: client.ApiClient, namespace: str) -> None:
    """A ResourceQuota ``storage`` of ``requests.storage: QUOTA`` in ``namespace``, once the quota controller
    has counted its use (until then the admission plugin refuses every claim: "status unknown for quota",
    k8s.io/apiserver v0.34.4 ``pkg/admission/plugin/resourcequota/controller.go``)."""
    core = client.CoreV1Api(api)
    core.create_namespaced_resource_quota(namespace, {"metadata": {"name": "storage"},
                                                      "spec": {"hard": {"requests.storage": QUOTA}}})
    wait_for(lambda: (core.read_namespaced_resource_quota("storage", namespace).status.hard or {}).get(
        "requests.storage"), WAIT, f"the storage quota of {namespace} to be counted")


def test_a_quota_and_a_missing_crd_fail_up_with_the_servers_message_then_up_converges(
        tmp_path: Path, cluster: Cluster, api: client.ApiClient, namespace: str) -> None:
    storage_quota(api, namespace)
    too_big = rendered(namespace, "20Gi")
    assert [m.role for m in too_big.manifests if m.custom] == ["pytorchjob"]
    assert any(m.body["kind"] == "PersistentVolumeClaim" for m in too_big.manifests)
    project = copy_project(tmp_path / "project", "dev", cluster_stack("existing", cluster.kubeconfig).config)
    (project / "__main__.py").write_text(PROGRAM)
    engine = Engine(project, tmp_path / "state", cluster.kubeconfig, {"JOB_NAMESPACE": namespace, "CLAIM_SIZE": "20Gi"})
    engine.run("stack", "init", "dev")
    crd = None
    try:
        refused = engine.run("up", "--yes", timeout=1200, check=False)
        output = refused.stdout + refused.stderr
        assert refused.returncode != 0, output
        assert ('persistentvolumeclaims "checkpoints" is forbidden: exceeded quota: storage, '
                f"requested: requests.storage=20Gi, used: requests.storage=0, limited: requests.storage={QUOTA}"
                ) in output, output
        assert not {"claim-checkpoints", "pytorchjob"} & set(existing(api, too_big))

        engine = dataclasses.replace(engine, extra_env={"JOB_NAMESPACE": namespace, "CLAIM_SIZE": "5Gi"})
        job = rendered(namespace, "5Gi")
        refused = engine.run("up", "--yes", timeout=1200, check=False)
        output = refused.stdout + refused.stderr
        assert refused.returncode != 0, output
        assert 'no matches for kind "PyTorchJob" in version "kubeflow.org/v1"' in output, output
        assert existing(api, job) == [m.role for m in job.manifests if m.role != "pytorchjob"]

        crd = apply_crd(api, crds.crd_file(PYTORCHJOB_CRD))
        engine.run("up", "--yes", timeout=1200)
        assert existing(api, job) == [m.role for m in job.manifests]
        engine.run("preview", "--expect-no-changes", timeout=1200)

        engine.run("destroy", "--yes", timeout=1200)
        assert existing(api, job) == []
    finally:
        engine.run("destroy", "--yes", timeout=1200, check=False)
        if crd is not None:
            delete_crd(api, crd)
