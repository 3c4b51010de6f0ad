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

import contextlib
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from components.addons.kueue import PYTORCHJOB_FRAMEWORK
from testbed.cluster.charts import addon_copies
from testbed.cluster.engine import Engine
from testbed.cluster.lifecycle import Cluster
from testbed.cluster.project import addon_stack, copy_project
from testbed.cluster.waiting import Timeout, wait_for
from tests.cluster.kube import WAIT
from tests.cluster.releases import (
    KUEUE_NAMESPACE,
    KUEUE_RELEASE,
    Key,
    keys,
    overlay_objects,
    present,
    release_manifest,
    removed_afterwards,
    state_objects,
)

pytestmark = pytest.mark.cluster

STACK = "existing"
ADDONS = ["training-operator", "kueue"]


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
