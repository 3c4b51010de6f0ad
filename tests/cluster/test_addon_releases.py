"""The ``existing`` stack's add-ons, the training operator's v1.9.4 standalone overlay and Kueue's 0.19.2 Helm chart,
installed through the real engine from local copies (``trainplane:addonCopies``: the copies each release's Go module
zip holds, ``testbed/cluster/charts.py``): every object the overlay and the release hold exists in the API afterwards
(listed with the ``kubernetes`` client: the release's from Helm's own record of it, its release Secret), a second
``up`` changes nothing, and ``destroy`` leaves none of them.

What runs here and what does not: kwok marks the controllers' pods Running and Ready without running them, so the
releases' waits finish (Helm's for the Kueue release, ``skip_await`` unset; pulumi-kubernetes' for the overlay's
Deployment), but no webhook, visibility API or controller answers. Left out of the stack, so (``project.addon_stack``):
Kueue's queues and the job, which its webhooks (``failurePolicy: Fail``, kubernetes-sigs/kueue v0.19.2
``charts/kueue/templates/webhook/manifests.yaml``: the queue kinds with no selector, Jobs, Pods, Deployments,
StatefulSets and PyTorchJobs in every namespace but ``kube-system`` and the release's) and the operator's (every
PyTorchJob, kubeflow/training-operator v1.9.4 ``manifests/base/webhook/manifests.yaml``) would refuse; no object
this stack creates after the webhooks is one they select (the operator's Deployment and pods come first: Kueue
depends on it), and ``destroy`` removes the webhooks before the operator, whose Deployment's deletion updates are the
only ones ``mdeployment.kb.io`` could see. ``tests/cluster/live_kueue.py`` and ``live_training_operator.py`` run the
controllers themselves.

To check when it runs: kwok gives the Kueue manager's pod a Ready status, so the visibility Service (its two
APIServices, ``templates/visibility``) has endpoints, and kube-aggregator's availability check dials the Service's
cluster IP, which no route on this machine keeps local (no kube-proxy); the API server's log shows what came of it.

In the cluster tier (CI) since 2026-12-02: it needs no build beyond the default parts; here the test took 203 s
with the cluster starting (its first ``up`` 87 s on an earlier run).
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, dynamic
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from components.addons.kueue import PYTORCHJOB_FRAMEWORK
from components.addons.versions import KUEUE
from testbed.cluster.charts import addon_copies
from testbed.cluster.engine import Engine
from testbed.cluster.lifecycle import Cluster
from testbed.cluster.project import addon_stack, copy_project
from testbed.cluster.waiting import Timeout, wait_for
from tests.cluster.kube import WAIT

pytestmark = pytest.mark.cluster

STACK = "existing"
ADDONS = ["training-operator", "kueue"]
KUEUE_NAMESPACE, KUEUE_RELEASE = "kueue-system", "kueue"
"""Where the Kueue add-on installs its release, and its name (``components/addons/kueue.py``)."""
Key = tuple[str, str, str, str]


def release_manifest(api: client.ApiClient, namespace: str, release: str) -> list[dict[str, Any]]:
    """The objects of the deployed revision of a Helm release, from Helm's record in the cluster: the Secret
    ``sh.helm.release.v1.<release>.v<revision>`` (labels ``owner=helm``, ``name``, ``status``) holding the release
    as base64 of gzipped JSON, its ``manifest`` the rendered templates."""
    secrets = client.CoreV1Api(api).list_namespaced_secret(
        namespace, label_selector=f"owner=helm,name={release},status=deployed").items
    assert len(secrets) == 1, [s.metadata.name for s in secrets]
    record = json.loads(gzip.decompress(base64.b64decode(base64.b64decode(secrets[0].data["release"]))))
    return [o for o in yaml.safe_load_all(record["manifest"]) if o]


def overlay_objects(directory: Path) -> list[dict[str, Any]]:
    """The objects of a kustomize overlay as kustomize builds them, for what the training operator's uses: its
    ``resources`` (files and directories), ``secretGenerator`` names, patches that rename an object, and the
    overlay's ``namespace``."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    objects: list[dict[str, Any]] = []
    for entry in kustomization.get("resources", []):
        path = directory / entry
        objects += overlay_objects(path) if path.is_dir() else [o for o in yaml.safe_load_all(path.read_text()) if o]
    for patch in kustomization.get("patches", []):
        ops = yaml.safe_load((directory / patch["path"]).read_text())
        for op in (o for o in ops if o["path"] == "/metadata/name"):
            for target in (o for o in objects if o["kind"] == patch["target"]["kind"]):
                target["metadata"]["name"] = op["value"]
    objects += [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": g["name"]}}
                for g in kustomization.get("secretGenerator", [])]
    if kustomization.get("namespace"):
        for o in objects:
            o["metadata"]["namespace"] = kustomization["namespace"]
    return objects


def keys(api: client.ApiClient, objects: list[dict[str, Any]], default_namespace: str) -> set[Key]:
    """(apiVersion, kind, namespace, name) of each object; the namespace empty for a cluster-scoped kind."""
    found, resources = set(), dynamic.DynamicClient(api).resources
    for o in objects:
        resource = resources.get(api_version=o["apiVersion"], kind=o["kind"])
        namespace = (o["metadata"].get("namespace") or default_namespace) if resource.namespaced else ""
        found.add((o["apiVersion"], o["kind"], namespace, o["metadata"]["name"]))
    return found


def present(api: client.ApiClient, wanted: set[Key]) -> set[Key]:
    """The objects of ``wanted`` the API server holds now (kinds whose CRD is gone count as absent)."""
    held, resources = set(), dynamic.DynamicClient(api).resources
    for key in wanted:
        api_version, kind, namespace, name = key
        try:
            resource = resources.get(api_version=api_version, kind=kind)
            resource.get(name=name, namespace=namespace or None)
        except (ApiException, ResourceNotFoundError):
            continue
        held.add(key)
    return held


def state_objects(engine: Engine) -> set[tuple[str, str, str]]:
    """(kind, namespace, name) of every Kubernetes object in the stack's state (the Helm release is one resource)."""
    exported = json.loads(engine.run("stack", "export").stdout)
    return {(r["outputs"]["kind"], r["outputs"]["metadata"].get("namespace") or "", r["outputs"]["metadata"]["name"])
            for r in exported["deployment"].get("resources", [])
            if r["type"].startswith("kubernetes:") and "kind" in r.get("outputs", {})}


GATES = (("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"),
         ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"),
         ("apiregistration.k8s.io/v1", "APIService"))
"""The kinds that would refuse or hold up other tests' objects if left behind (webhooks with no server, an
aggregated API with none)."""


@contextlib.contextmanager
def removed_afterwards(api: client.ApiClient, objects: dict[str, set[Key]]) -> Iterator[None]:
    """Whatever a failed ``destroy`` (or ``up``) left of the add-ons is deleted after the test: first the Kueue
    chart's webhooks and APIServices (by its ``helm.sh/chart`` label, so also when ``up`` failed before the release
    was read) and the gate kinds among ``objects``, then the rest, and the namespace Helm made for the release."""
    try:
        yield
    finally:
        resources = dynamic.DynamicClient(api).resources
        every = set().union(*objects.values())
        for api_version, kind in GATES:
            with contextlib.suppress(ApiException):
                resources.get(api_version=api_version, kind=kind).delete(
                    label_selector=f"helm.sh/chart={KUEUE.name}-{KUEUE.version}")
        first = [k for k in every if (k[0], k[1]) in GATES]
        for api_version, kind, namespace, name in [*first, *(k for k in every if k not in first)]:
            with contextlib.suppress(ApiException, ResourceNotFoundError):
                resources.get(api_version=api_version, kind=kind).delete(name=name, namespace=namespace or None)
        with contextlib.suppress(ApiException):
            client.CoreV1Api(api).delete_namespace(KUEUE_NAMESPACE)


def test_the_existing_stacks_addons_install_from_local_copies_converge_and_destroy(
        tmp_path: Path, cluster: Cluster, api: client.ApiClient) -> None:
    copies = addon_copies(ADDONS)
    stack = addon_stack(STACK, cluster.kubeconfig, copies)
    assert stack.config["trainplane:addons"] == ADDONS, "the stack's own add-ons"
    assert stack.left_out == ("trainplane:kueue", "trainplane:jobs")
    engine = Engine(copy_project(tmp_path / "project", STACK, stack.config), tmp_path / "state", cluster.kubeconfig)
    engine.run("stack", "init", STACK)
    overlay = keys(api, overlay_objects(Path(copies["training-operator"])), "")
    objects: dict[str, set[Key]] = {"training-operator": overlay}
    with removed_afterwards(api, objects):
        preview = engine.run("preview", timeout=1200)
        assert "kueue" in preview.stdout and "training-operator" in preview.stdout, preview.stdout
        assert sorted(present(api, overlay)) == [], "a preview creates nothing"
        started = time.monotonic()
        engine.run("up", "--yes", timeout=1200)
        print(f"pulumi up of the {STACK} stack's add-ons from local copies: {time.monotonic() - started:.0f} s")
        objects["kueue"] = keys(api, release_manifest(api, KUEUE_NAMESPACE, KUEUE_RELEASE), KUEUE_NAMESPACE)
        release = objects["kueue"]
        assert sorted(overlay - present(api, overlay)) == [] and sorted(release - present(api, release)) == []
        assert {(kind, ns, name) for _, kind, ns, name in overlay} == state_objects(engine), "the overlay, whole"
        kinds = {k[1] for k in release}
        assert kinds >= {"CustomResourceDefinition", "Deployment", "ServiceAccount", "ClusterRole",
                         "ClusterRoleBinding", "Role", "RoleBinding", "Service", "ConfigMap", "Secret",
                         "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "APIService"}, kinds
        crds = {k[3] for k in release | overlay if k[1] == "CustomResourceDefinition"}
        assert {"clusterqueues.kueue.x-k8s.io", "workloads.kueue.x-k8s.io", "pytorchjobs.kubeflow.org"} <= crds

        core = client.CoreV1Api(api)
        config = yaml.safe_load(core.read_namespaced_config_map("kueue-manager-config", KUEUE_NAMESPACE)
                                .data["controller_manager_config.yaml"])
        assert PYTORCHJOB_FRAMEWORK in config["integrations"]["frameworks"], "the stack's values reached the chart"
        assert config["waitForPodsReady"]["recoveryTimeout"] == "0s"
        for namespace, name in ((KUEUE_NAMESPACE, "kueue-controller-manager"), ("kubeflow", "training-operator")):
            deployment = client.AppsV1Api(api).read_namespaced_deployment(name, namespace)
            assert deployment.status.ready_replicas == deployment.spec.replicas, f"{name}: kwok made its pods Ready"

        started = time.monotonic()
        engine.run("up", "--yes", "--expect-no-changes", timeout=1200)
        print(f"second pulumi up (no changes): {time.monotonic() - started:.0f} s")

        started = time.monotonic()
        engine.run("destroy", "--yes", timeout=1200)
        print(f"pulumi destroy: {time.monotonic() - started:.0f} s")
        every = overlay | release
        with contextlib.suppress(Timeout):  # a CRD goes once its finalizer ran; the namespace once it is empty
            wait_for(lambda: not present(api, every), WAIT, "every object of the add-ons to be gone", interval=2)
        assert sorted(present(api, every)) == []
