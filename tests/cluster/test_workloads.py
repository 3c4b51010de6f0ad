"""Every workload kind a DistributedJob renders, created through the real API server and reconciled by
the real controllers: the Job controller's indexed pods, the StatefulSet controller's pods, the
EndpointSlice controller's slices for the headless Service, the scheduler's placement of GPU pods on the
GPU nodes only (taints, requests), and the PyTorchJob custom resource accepted under its CRD.

The objects are ``render_job``'s, the same the component registers (the token a plain string here), so
what the server refuses, prunes or defaults here it does under ``pulumi up``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from components.job.bundle import build_bundle
from components.job.pod import pod_selector
from components.job.render import RenderedJob, render_job
from testbed.cluster import crds, nodes
from testbed.cluster.waiting import wait_for
from tests.cluster.kube import WAIT, apply_crd, create, delete_crd, missing_from, wait_for_pods
from tests.components.componenttest import TOKEN, job_args

pytestmark = pytest.mark.cluster

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


def deploy(api: client.ApiClient, namespace: str, name: str = "demo",
           **overrides: Any) -> tuple[RenderedJob, dict[str, dict[str, Any]]]:
    """Render job ``name`` into ``namespace`` and create each of its objects in order; role -> stored object.
    Asserts the server kept every field sent (nothing pruned, nothing rewritten)."""
    rendered = render_job(name, job_args(namespace=namespace, **overrides), TOKEN, build_bundle())
    stored: dict[str, dict[str, Any]] = {}
    for manifest in rendered.manifests:
        kept = create(api, manifest.body)
        sent = {k: v for k, v in manifest.body.items() if k not in ("stringData",)}
        assert missing_from(sent, kept) == [], (manifest.role, missing_from(sent, kept))
        stored[manifest.role] = kept
    return rendered, stored


def selector(rendered: RenderedJob) -> str:
    return ",".join(f"{k}={v}" for k, v in pod_selector(rendered.names).items())


@pytest.fixture(scope="module")
def pytorchjob_crd(api: client.ApiClient) -> Iterator[None]:
    """The PyTorchJob CRD, applied and Established."""
    name = apply_crd(api, crds.crd_file("kubeflow.org_pytorchjobs.yaml"))
    yield
    delete_crd(api, name)


@pytest.mark.parametrize("elastic", [False, True], ids=["fixed", "elastic"])
def test_an_indexed_job_gets_one_pod_per_index_from_the_job_controller(
        api: client.ApiClient, namespace: str, elastic: bool) -> None:
    overrides: dict[str, Any] = {"workers": 3}
    if elastic:
        overrides.update(min_workers=2, max_workers=3)
    rendered, stored = deploy(api, namespace, **overrides)
    job = stored["indexed-job"]
    assert job["spec"]["completionMode"] == "Indexed"
    found = wait_for_pods(api, namespace, selector(rendered), 3)
    assert sorted(p.metadata.annotations[COMPLETION_INDEX] for p in found) == ["0", "1", "2"]
    assert {p.spec.node_name for p in found} <= set(nodes.CPU_NODES)


def test_gpu_pods_are_bound_to_the_gpu_nodes_only(api: client.ApiClient, namespace: str) -> None:
    rendered, _ = deploy(api, namespace, workers=2, gpus=1)
    found = wait_for_pods(api, namespace, selector(rendered), 2)
    assert sorted(p.spec.node_name for p in found) == sorted(nodes.GPU_NODES)


def test_a_service_job_gets_statefulset_pods_and_endpoint_slices(api: client.ApiClient, namespace: str) -> None:
    rendered, stored = deploy(api, namespace, mode="service", workers=2)
    assert "statefulset" in stored
    found = wait_for_pods(api, namespace, selector(rendered), 2)
    assert sorted(p.metadata.name for p in found) == [f"{rendered.names.job}-0", f"{rendered.names.job}-1"]
    service = stored["service"]["metadata"]["name"]
    discovery = client.DiscoveryV1Api(api)

    def addressed() -> set[str] | None:
        slices = discovery.list_namespaced_endpoint_slice(
            namespace, label_selector=f"kubernetes.io/service-name={service}").items
        names = {e.target_ref.name for s in slices for e in s.endpoints or [] if e.target_ref}
        return names if len(names) == 2 else None

    assert wait_for(addressed, WAIT, "EndpointSlices of the headless Service") == {p.metadata.name for p in found}


def test_a_pytorchjob_is_accepted_under_its_crd(api: client.ApiClient, namespace: str, pytorchjob_crd: None) -> None:
    _, stored = deploy(api, namespace, backend="pytorchjob", workers=2)
    job = stored["pytorchjob"]
    assert job["kind"] == "PyTorchJob"
    assert job["metadata"]["uid"]
