"""A stack the API server refuses fails ``pulumi up`` with the server's message, and a second ``up`` after the
fix converges, through the real engine, the Python language host and the real ``DistributedJob``.

One program, one stack, two refusals in the order a new team meets them:

- the job's namespace does not exist yet: the API server refuses the job's first object with its own
  message (``namespaces "<name>" not found``, the NamespaceLifecycle admission plugin's), and nothing of the
  job is created;
- the namespace made, the job (``backend="pytorchjob"``) needs the PyTorchJob CRD, which no add-on installed:
  the job's plain objects are created, the PyTorchJob is refused, and the output says why (the kubernetes
  provider's sentence around the API's own ``no matches for kind "PyTorchJob" in version "kubeflow.org/v1"``,
  which it gets from the server's discovery: the server serves no such kind);
- the CRD applied (the one ``python -m testbed.cluster build`` generates), ``up`` converges: every object the
  job renders exists in the API (read with the ``kubernetes`` client), and a preview plans no change.

An immutable field is not among the refusals: an edit the server would refuse is a replacement before it
reaches the server. The component replaces a Job on every field ``validateJobSpecUpdate`` makes immutable
and a PyTorchJob on any spec change (``components/job/render.py``, ``REPLACED_ON``), and the kubernetes
provider replaces a StatefulSet whose selector, service name, pod management policy or claim templates
change and a Service whose ``clusterIP`` does (its ``forceNew`` paths: pulumi-kubernetes provider/v4 at the
pinned commit, ``pkg/provider/diff.go``); ``tests/cluster/test_engine.py`` shows an image edit replacing the
Job once. So the second refusal here is the namespace.
"""

from __future__ import annotations

import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

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
    job = DistributedJob("trainer", DistributedJobArgs(image="python:3.11-slim", workers=2, num_proc=1,
                                                       script="train.py", backend="pytorchjob",
                                                       namespace=os.environ["JOB_NAMESPACE"]),
                         opts=pulumi.ResourceOptions(provider=provider))
    pulumi.export("job", job.job_name)
''')
PYTORCHJOB_CRD = "kubeflow.org_pytorchjobs.yaml"


def rendered(namespace: str) -> RenderedJob:
    """What ``PROGRAM`` registers (the token aside, which no name depends on)."""
    args = job_args(namespace=namespace, workers=2, num_proc=1, backend="pytorchjob")
    return render_job("trainer", args, TOKEN, build_bundle())


def existing(api: client.ApiClient, job: RenderedJob) -> list[str]:
    """The roles of ``job``'s objects the API server holds now."""
    return [m.role for m in job.manifests if live(api, m.body) is not None]


@pytest.fixture
def unused_namespace(api: client.ApiClient) -> Iterator[str]:
    """A namespace name nothing created yet; the namespace is deleted after the test if it was made."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    yield name
    core = client.CoreV1Api(api)
    if core.list_namespace(field_selector=f"metadata.name={name}").items:
        core.delete_namespace(name)


def test_a_missing_namespace_and_a_missing_crd_fail_up_with_the_servers_message_then_up_converges(
        tmp_path: Path, cluster: Cluster, api: client.ApiClient, unused_namespace: str) -> None:
    namespace = unused_namespace
    job = rendered(namespace)
    assert [m.role for m in job.manifests if m.custom] == ["pytorchjob"]
    project = copy_project(tmp_path / "project", "dev", cluster_stack("existing", cluster.kubeconfig).config)
    (project / "__main__.py").write_text(PROGRAM)
    engine = Engine(project, tmp_path / "state", cluster.kubeconfig, {"JOB_NAMESPACE": namespace})
    engine.run("stack", "init", "dev")
    crd = None
    try:
        refused = engine.run("up", "--yes", timeout=1200, check=False)
        output = refused.stdout + refused.stderr
        assert refused.returncode != 0, output
        assert f'namespaces "{namespace}" not found' in output, output
        assert existing(api, job) == []

        core = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": namespace}})
        wait_for(lambda: core.read_namespaced_service_account("default", namespace), WAIT,
                 f"namespace {namespace}'s ServiceAccount")
        refused = engine.run("up", "--yes", timeout=1200, check=False)
        output = refused.stdout + refused.stderr
        assert refused.returncode != 0, output
        assert 'no matches for kind "PyTorchJob" in version "kubeflow.org/v1"' in output, output
        assert "pytorchjob" not in existing(api, job)

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
