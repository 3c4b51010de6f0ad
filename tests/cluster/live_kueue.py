"""Kueue's real manager (sigs.k8s.io/kueue at the add-on's release, built from its Go module) with the manager
configuration the ``Kueue`` add-on renders, against the test cluster (issue 21): a job labelled for a queue is
created suspended and stays so until Kueue admits it, then runs; a job over its ClusterQueue's quota stays
suspended, its Workload pending with Kueue's reason.

The queues are the add-on's own objects (``resource_flavor``, ``cluster_queue``, ``local_queue``) and the jobs
``render_job``'s; ``testbed/cluster/kueue.py`` says what of the Helm release this leaves out.

Not collected by a plain ``pytest`` (the file name is not ``test_*.py``), so CI does not build Kueue: its cold
build took 13 minutes here beside CI's own run (``testbed/cluster/kueue.py``). Run it by path:
``.venv/bin/python -m pytest -q tests/cluster/live_kueue.py`` (the first run builds the manager).
"""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, dynamic

from components.addons.kueue import (
    KNOWN_FRAMEWORKS,
    ClusterQueueArgs,
    KueueArgs,
    LocalQueueArgs,
    ResourceFlavorArgs,
    chart_values,
    cluster_queue,
    local_queue,
    resource_flavor,
)
from components.addons.versions import KUEUE_API
from components.errors import ArgumentError
from runtime.local.ports import free_port
from testbed.cluster import kueue
from testbed.cluster.lifecycle import Cluster
from testbed.cluster.pki import Pki
from testbed.cluster.waiting import wait_for
from tests.cluster.kube import WAIT, create, pods, wait_for_pods
from tests.cluster.test_workloads import deploy, selector

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1800)]

QUEUE = "team"


@dataclass(frozen=True)
class LiveKueue:
    """The running manager and the namespace its webhooks admit."""

    manager: kueue.KueueManager
    namespace: str


def addon_args(namespace: str) -> KueueArgs:
    """One flavor, a ClusterQueue of 4 CPUs and 16 GiB, and a LocalQueue in ``namespace``."""
    return KueueArgs(flavors=[ResourceFlavorArgs(name="default")],
                     cluster_queues=[ClusterQueueArgs(name=f"cq-{namespace}",
                                                      quotas={"default": {"cpu": "4", "memory": "16Gi"}})],
                     local_queues=[LocalQueueArgs(name=QUEUE, namespace=namespace, cluster_queue=f"cq-{namespace}")])


@pytest.fixture(scope="module")
def live(cluster: Cluster, api: client.ApiClient) -> Iterator[LiveKueue]:
    """Kueue's CRDs, its manager with the add-on's config, its webhooks (for one namespace) and the add-on's
    queues; all removed afterwards, the webhooks first."""
    found = kueue.manifests()
    extensions = client.ApiextensionsV1Api(api)
    core, admission = client.CoreV1Api(api), client.AdmissionregistrationV1Api(api)
    names = []
    for path in found.crds:
        body = yaml.safe_load(path.read_text())
        extensions.create_custom_resource_definition(body)
        names.append(body["metadata"]["name"])

    def established() -> bool:
        return all(any(c.type == "Established" and c.status == "True"
                       for c in extensions.read_custom_resource_definition(n).status.conditions or []) for n in names)

    wait_for(established, WAIT, "Kueue's CRDs to be Established")
    namespace = f"kueue-{uuid.uuid4().hex[:8]}"
    for name in ("kueue-system", namespace):
        core.create_namespace({"metadata": {"name": name}})
    args = addon_args(namespace)
    ports: list[int] = []
    for _ in range(3):
        ports.append(free_port("127.0.0.1", avoid=ports))
    rendered = chart_values(args)["managerConfig"]["controllerManagerConfigYaml"]
    manager = kueue.start(rendered, cluster.kubeconfig, Pki(cluster.state / "pki"), ports)
    hooks = kueue.webhook_configurations(found.webhooks, manager.webhook_port, Pki(cluster.state / "pki").ca,
                                         [namespace])
    try:
        for hook in hooks:
            create(api, hook)
        for obj in (*map(resource_flavor, args.flavors), *map(cluster_queue, args.cluster_queues),
                    *map(local_queue, args.local_queues)):
            create(api, obj)
        yield LiveKueue(manager, namespace)
    finally:
        for hook in hooks:
            delete = (admission.delete_mutating_webhook_configuration if hook["kind"].startswith("Mutating")
                      else admission.delete_validating_webhook_configuration)
            delete(hook["metadata"]["name"])
        manager.stop()
        for name in ("kueue-system", namespace):
            core.delete_namespace(name)
        for name in names:
            extensions.delete_custom_resource_definition(name)


def workload_of(api: client.ApiClient, namespace: str, job: str) -> dict[str, Any] | None:
    """The Workload Kueue made for Job ``job``, or None yet."""
    resource = dynamic.DynamicClient(api).resources.get(api_version=KUEUE_API, kind="Workload")
    for found in resource.get(namespace=namespace).items:
        owners = found.metadata.get("ownerReferences") or []
        if any(o["kind"] == "Job" and o["name"] == job for o in owners):
            return dict(found.to_dict())
    return None


def condition(workload: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    if workload is None:
        return None
    return next((c for c in workload.get("status", {}).get("conditions", []) if c["type"] == kind), None)


def test_the_managers_config_is_the_addons(live: LiveKueue) -> None:
    """Every setting but the out-of-cluster ones (``kueue.OUT_OF_CLUSTER``) is what the add-on hands its chart:
    the integrations and ``waitForPodsReady`` with ``recoveryTimeout: 0s``."""
    rendered = yaml.safe_load(chart_values(addon_args(live.namespace))["managerConfig"]["controllerManagerConfigYaml"])
    kept = {k: v for k, v in live.manager.config.items() if k not in kueue.OUT_OF_CLUSTER}
    assert kept == {k: v for k, v in rendered.items() if k not in kueue.OUT_OF_CLUSTER}
    assert kept["waitForPodsReady"]["recoveryTimeout"] == "0s"


def test_a_job_over_the_quota_stays_suspended_with_kueues_reason(api: client.ApiClient, live: LiveKueue) -> None:
    """Two pods of 3 CPUs each ask for 6 of the ClusterQueue's 4: Kueue's job webhook suspends the Job at
    creation (trainplane sends none), its Workload gets ``QuotaReserved: False`` (reason ``Pending``, Kueue's
    message naming the insufficient quota) and no pod is made."""
    rendered, stored = deploy(api, live.namespace, name="too-big", gang_scheduler="kueue", queue=QUEUE, workers=2,
                              cpus=3)
    job = rendered.names.job
    assert stored["indexed-job"]["spec"]["suspend"] is True, "suspended by Kueue's webhook at creation"

    def pending() -> dict[str, Any] | None:
        reserved = condition(workload_of(api, live.namespace, job), "QuotaReserved")
        return reserved if reserved is not None and reserved["status"] == "False" else None

    reserved = wait_for(pending, WAIT, "Kueue to mark the Workload pending")
    assert reserved["reason"] == "Pending"
    assert "insufficient quota for cpu" in reserved["message"], reserved["message"]
    assert client.BatchV1Api(api).read_namespaced_job(job, live.namespace).spec.suspend is True
    assert pods(api, live.namespace, selector(rendered)) == []


def test_a_queued_job_is_suspended_until_kueue_admits_it_and_then_runs(api: client.ApiClient,
                                                                      live: LiveKueue) -> None:
    """Two pods of 1 CPU fit the quota: the Job is created suspended, Kueue admits its Workload (``Admitted``),
    unsuspends it, and the Job controller makes its pods."""
    rendered, stored = deploy(api, live.namespace, name="fits", gang_scheduler="kueue", queue=QUEUE, workers=2, cpus=1)
    job = rendered.names.job
    assert stored["indexed-job"]["spec"]["suspend"] is True

    def admitted() -> dict[str, Any] | None:
        found = condition(workload_of(api, live.namespace, job), "Admitted")
        return found if found is not None and found["status"] == "True" else None

    wait_for(admitted, WAIT, "Kueue to admit the Workload")
    wait_for(lambda: client.BatchV1Api(api).read_namespaced_job(job, live.namespace).spec.suspend is False, WAIT,
             "Kueue to unsuspend the admitted Job")
    assert len(wait_for_pods(api, live.namespace, selector(rendered), 2)) == 2


def test_kueue_refuses_a_misspelt_framework_naming_the_ones_the_addon_knows(tmp_path: Path) -> None:
    """The manager's own check of ``integrations.frameworks`` (v0.19.2 ``pkg/config/validation.go``): with one
    framework misspelt in the add-on's otherwise rendered config it exits at start-up, before it reaches any
    cluster, listing the frameworks it supports, which are exactly ``KNOWN_FRAMEWORKS``, the list the add-on
    refuses others by at preview."""
    config = yaml.safe_load(chart_values(KueueArgs())["managerConfig"]["controllerManagerConfigYaml"])
    config["integrations"]["frameworks"] = ["batch/job", "kubeflow.org/pytorchjobs"]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    done = subprocess.run([str(kueue.manager_binary()), f"--config={tmp_path / 'config.yaml'}"],
                          capture_output=True, text=True, timeout=120, check=False)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    errors = [json.loads(line)["error"] for line in out.splitlines()
              if line.startswith("{") and json.loads(line).get("msg") == "Unable to validate the configuration"]
    assert errors, out
    refused = re.search(r'Unsupported value: "kubeflow.org/pytorchjobs": supported values: (.*)', errors[0])
    assert refused is not None, errors[0]
    assert re.findall(r'"([^"]+)"', refused.group(1)) == list(KNOWN_FRAMEWORKS)
    with pytest.raises(ArgumentError):
        KueueArgs(frameworks=config["integrations"]["frameworks"])
