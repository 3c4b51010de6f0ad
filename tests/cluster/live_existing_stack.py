"""The ``existing`` stack as written, through the real engine, with its add-ons' controllers answering: the
training operator's v1.9.4 overlay and Kueue's 0.19.2 chart from local copies (``trainplane:addonCopies``), Kueue's
flavor and queues, and the digits job as a PyTorchJob queued through Kueue. Every object the stack registers exists
in the API afterwards (listed with the ``kubernetes`` client), Kueue admits the PyTorchJob's Workload, the operator
makes its pods and the scheduler binds them; a second ``up`` changes nothing; ``destroy`` leaves none of them.

What stands in for what a pod would do: no pod runs the releases' controllers here (kwok only marks their pods
Ready), so the operator and Kueue's manager run as processes (``testbed/cluster/training_operator.py``,
``kueue.py``) with what the releases deployed: the operator's Deployment's ``args`` and Kueue's
``kueue-manager-config`` ConfigMap, read back from the cluster. The releases' own webhook configurations stay, their
clients sent to those processes (``webhooks.redirect_patch``: a URL on loopback in place of the Service no pod
serves), their rules, selectors and failure policies the releases'. Since the controllers need their CRDs, which
the releases install, the stack goes up in two steps: first with its add-ons alone (``project.addon_stack``, as
``test_addon_releases.py``), then the controllers start, and then the whole stack as written
(``project.whole_stack``), whose ``up`` creates the queues and the job; neither redirect nor certificate shows as a
change to the engine, which does not refresh.

Run by path: the two controllers' first builds take 13 to 19 minutes each on 2 cores, which keeps them out of CI;
the test builds either when it is not cached (hence its hour's timeout), or ``python -m testbed.cluster build --with
training-operator`` builds the operator beforehand.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any, Callable

import pytest
from kubernetes import client

from components.addons.kueue import cluster_queue, local_queue, resource_flavor
from components.addons.training_operator import OPERATOR_CONTAINER, WEBHOOK_CERT_SECRET, WEBHOOK_CONFIGURATION
from components.job.bundle import build_bundle
from components.job.render import render_job
from components.stack.config import parse_jobs, parse_kueue
from testbed.cluster import kueue, training_operator
from testbed.cluster.charts import addon_copies
from testbed.cluster.engine import Engine
from testbed.cluster.lifecycle import Cluster
from testbed.cluster.pki import Pki
from testbed.cluster.project import addon_stack, copy_project, whole_stack, write_stack
from testbed.cluster.waiting import wait_for
from testbed.cluster.webhooks import redirect_patch
from tests.cluster.controllers import condition, loopback_ports, workload_of
from tests.cluster.kube import WAIT, wait_for_pods
from tests.cluster.releases import (
    KUEUE_NAMESPACE,
    KUEUE_RELEASE,
    Key,
    keys,
    overlay_objects,
    present,
    release_manifest,
    removed_afterwards,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(3600)]

STACK = "existing"
ADDONS = ["training-operator", "kueue"]
OPERATOR_NAMESPACE = "kubeflow"
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def stack_objects(config: dict[str, Any]) -> list[dict[str, Any]]:
    """What the stack registers beyond its add-ons' releases: Kueue's flavors and queues and every job's objects
    (rendered as the program renders them; only the token's value differs, which no name depends on)."""
    args = parse_kueue(config["trainplane:kueue"])
    queues = [*map(resource_flavor, args.flavors), *map(cluster_queue, args.cluster_queues),
              *map(local_queue, args.local_queues)]
    bundle = build_bundle()
    jobs = [m.body for job in parse_jobs(config["trainplane:jobs"])
            for m in render_job(job.name, job.args, "unused", bundle).manifests]
    return queues + jobs


def redirect(api: client.ApiClient, kind: str, name: str, port: int, ca_pem: bytes) -> None:
    """Send the webhooks of the release's ``kind`` ``name`` to the process on ``127.0.0.1:port``."""
    admission = client.AdmissionregistrationV1Api(api)
    read, patch = ((admission.read_mutating_webhook_configuration, admission.patch_mutating_webhook_configuration)
                   if kind == "MutatingWebhookConfiguration" else
                   (admission.read_validating_webhook_configuration, admission.patch_validating_webhook_configuration))
    stored = api.sanitize_for_serialization(read(name))
    patch(name, redirect_patch(stored, port, ca_pem))


def start_operator(api: client.ApiClient, cluster: Cluster) -> training_operator.Operator:
    """The operator with its Deployment's ``args`` as the overlay deployed them, the certificate Secret the overlay
    made (empty) filled as its rotator keeps it, and the overlay's webhook configuration sent to it."""
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    deployment = apps.read_namespaced_deployment("training-operator", OPERATOR_NAMESPACE)
    [container] = [c for c in deployment.spec.template.spec.containers if c.name == OPERATOR_CONTAINER]
    secret = training_operator.certificate_secret()
    core.patch_namespaced_secret(WEBHOOK_CERT_SECRET, OPERATOR_NAMESPACE, {"data": secret["data"]})
    ports = loopback_ports(3)
    redirect(api, "ValidatingWebhookConfiguration", WEBHOOK_CONFIGURATION, ports[2],
             base64.b64decode(secret["data"]["ca.crt"]))
    return training_operator.start(list(container.args or []), secret, cluster.kubeconfig, ports)


def start_kueue(api: client.ApiClient, cluster: Cluster, release: set[Key]) -> kueue.KueueManager:
    """Kueue's manager with the config the release deployed, and the release's webhook configurations sent to it."""
    rendered = client.CoreV1Api(api).read_namespaced_config_map("kueue-manager-config", KUEUE_NAMESPACE) \
        .data["controller_manager_config.yaml"]
    pki = Pki(cluster.state / "pki")
    manager = kueue.start(rendered, cluster.kubeconfig, pki, loopback_ports(3))
    for _, kind, _, name in sorted(k for k in release if k[1] in WEBHOOK_KINDS):
        redirect(api, kind, name, manager.webhook_port, pki.ca.read_bytes())
    return manager


def timed(what: str, run: Callable[[], object]) -> None:
    started = time.monotonic()
    run()
    print(f"{what}: {time.monotonic() - started:.0f} s")


def test_the_existing_stack_as_written_deploys_admits_its_job_converges_and_destroys(
        tmp_path: Path, cluster: Cluster, api: client.ApiClient) -> None:
    copies = addon_copies(ADDONS)
    first, whole = addon_stack(STACK, cluster.kubeconfig, copies), whole_stack(STACK, cluster.kubeconfig, copies)
    assert whole.left_out == () and whole.config["trainplane:addons"] == ADDONS
    project = tmp_path / "project"
    engine = Engine(copy_project(project, STACK, first.config), tmp_path / "state", cluster.kubeconfig)
    engine.run("stack", "init", STACK)
    overlay = keys(api, overlay_objects(Path(copies["training-operator"])), "")
    objects: dict[str, set[Key]] = {"training-operator": overlay}
    stops: list[Callable[[], None]] = []
    try:
        with removed_afterwards(api, objects):
            timed("pulumi up of the add-ons", lambda: engine.run("up", "--yes", timeout=1200))
            objects["kueue"] = release = keys(api, release_manifest(api, KUEUE_NAMESPACE, KUEUE_RELEASE),
                                              KUEUE_NAMESPACE)
            stops.append(start_operator(api, cluster).stop)
            stops.append(start_kueue(api, cluster, release).stop)

            write_stack(project, STACK, whole.config)
            added = stack_objects(whole.config)
            objects["stack"] = wanted = keys(api, added, "default")
            assert {k[1] for k in wanted} >= {"ResourceFlavor", "ClusterQueue", "LocalQueue", "PyTorchJob",
                                              "Secret", "Service"}
            steps = json.loads(engine.run("preview", "--json", timeout=1200).stdout)["steps"]
            assert {s["op"] for s in steps} <= {"same", "create"}, [(s["op"], s["urn"]) for s in steps]
            created = {s["urn"].rsplit("::", 1)[1] for s in steps if s["op"] == "create"}
            assert any("digits" in c for c in created) and any("trainplane" in c for c in created), created
            timed("pulumi up of the whole stack", lambda: engine.run("up", "--yes", timeout=1200))
            assert sorted(wanted - present(api, wanted)) == []

            [job] = [o for o in added if o["kind"] == "PyTorchJob"]
            name, namespace = job["metadata"]["name"], job["metadata"].get("namespace", "default")
            admitted = wait_for(lambda: condition(workload_of(api, namespace, name, "PyTorchJob"), "Admitted"),
                                WAIT, "Kueue to admit the PyTorchJob's Workload")
            assert admitted["status"] == "True", admitted
            workers = sum(spec["replicas"] for spec in job["spec"]["pytorchReplicaSpecs"].values())
            made = wait_for_pods(api, namespace, f"training.kubeflow.org/job-name={name}", workers)
            assert len(made) == workers and all(p.spec.node_name for p in made)

            timed("second pulumi up (no changes)",
                  lambda: engine.run("up", "--yes", "--expect-no-changes", timeout=1200))
            timed("pulumi destroy", lambda: engine.run("destroy", "--yes", timeout=1200))
            every = overlay | release | wanted
            wait_for(lambda: not present(api, every), WAIT, "every object of the stack to be gone", interval=2)
    finally:
        for stop in reversed(stops):
            stop()
    assert sorted(present(api, every)) == []
