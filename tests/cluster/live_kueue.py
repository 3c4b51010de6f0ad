"""Kueue's real manager (sigs.k8s.io/kueue at the add-on's release, built from its Go module) with the manager
configuration the ``Kueue`` add-on renders, against the test cluster (issue 21): a job labelled for a queue is
created suspended and stays so until Kueue admits it, then runs; a job over its ClusterQueue's quota stays
suspended, its Workload pending with Kueue's reason; the GPU quota, set as a stack sets it to the GPUs of the GPU
nodes, admits a job on all of them and no more; a misspelt framework stops the manager, which lists exactly the
frameworks the add-on checks against.

The queues are the add-on's own objects (``resource_flavor``, ``cluster_queue``, ``local_queue``) from a stack's
``trainplane:kueue`` (``parse_kueue``) and the jobs ``render_job``'s; ``testbed/cluster/kueue.py`` says what of the
Helm release this leaves out. ``live_kueue_recovery.py`` shows ``recoveryTimeout`` live.

All 6 passed on 2026-12-03 (80 s, the manager cached), the memory case of the quota test included.

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
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from components.addons.kueue import KNOWN_FRAMEWORKS, KueueArgs, chart_values
from components.errors import ArgumentError
from components.stack.config import parse_kueue
from runtime.agent.contract import GPU_NODE_LABEL, GPU_RESOURCE
from testbed.cluster import kueue, nodes
from testbed.cluster.lifecycle import Cluster
from testbed.cluster.waiting import wait_for
from tests.cluster.controllers import LiveKueue, condition, kueue_crds, running_kueue, workload_of
from tests.cluster.kube import WAIT, pods, wait_for_pods
from tests.cluster.test_workloads import deploy, selector

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1800)]

QUEUE = "team"
GPU_QUEUE = "gpus"
GPUS = sum(int(n["status"]["allocatable"].get(GPU_RESOURCE, 0)) for n in nodes.all_nodes())
"""The GPUs the cluster's GPU nodes advertise (``testbed/cluster/nodes.py``: two nodes of one)."""


def addon_args(namespace: str) -> KueueArgs:
    """The add-on's args as a stack's ``trainplane:kueue`` gives them (``parse_kueue``): a CPU ClusterQueue of 4 CPUs
    and 16 GiB on the ``default`` flavor, and a GPU ClusterQueue whose ``gpu`` flavor selects the GPU nodes by their
    label and quotes the GPUs they advertise; a LocalQueue for each in ``namespace``."""
    return parse_kueue({
        "flavors": [{"name": "default"}, {"name": "gpu", "nodeLabels": {GPU_NODE_LABEL: "true"}}],
        "clusterQueues": [{"name": f"cq-{namespace}", "quotas": {"default": {"cpu": "4", "memory": "16Gi"}}},
                          {"name": f"gpu-{namespace}", "quotas": {"gpu": {GPU_RESOURCE: str(GPUS)}}}],
        "localQueues": [{"name": QUEUE, "namespace": namespace, "clusterQueue": f"cq-{namespace}"},
                        {"name": GPU_QUEUE, "namespace": namespace, "clusterQueue": f"gpu-{namespace}"}]})


@pytest.fixture(scope="module")
def live(cluster: Cluster, api: client.ApiClient) -> Iterator[LiveKueue]:
    """Kueue's CRDs, its manager with the add-on's config, its webhooks (for one namespace) and the add-on's
    queues; all removed afterwards (``tests/cluster/controllers.py``)."""
    namespace = f"kueue-{uuid.uuid4().hex[:8]}"
    with kueue_crds(api), running_kueue(cluster, api, namespace, addon_args(namespace)) as running:
        yield running


def test_the_managers_config_is_the_addons(live: LiveKueue) -> None:
    """Every setting but the out-of-cluster ones (``kueue.OUT_OF_CLUSTER``) is what the add-on hands its chart:
    the integrations and ``waitForPodsReady`` with ``recoveryTimeout: 0s``."""
    rendered = yaml.safe_load(chart_values(addon_args(live.namespace))["managerConfig"]["controllerManagerConfigYaml"])
    kept = {k: v for k, v in live.manager.config.items() if k not in kueue.OUT_OF_CLUSTER}
    assert kept == {k: v for k, v in rendered.items() if k not in kueue.OUT_OF_CLUSTER}
    assert kept["waitForPodsReady"]["recoveryTimeout"] == "0s"


@pytest.mark.parametrize(("resource", "asks"), [("cpu", {"cpus": 3}), ("memory", {"cpus": 1, "memory": "10Gi"})])
def test_a_job_over_the_quota_stays_suspended_with_kueues_reason(api: client.ApiClient, live: LiveKueue,
                                                                  resource: str, asks: dict[str, Any]) -> None:
    """Two pods of 3 CPUs each ask for 6 of the ClusterQueue's 4 (or of 10 GiB each for 20 of its 16 GiB): Kueue's
    job webhook suspends the Job at creation (trainplane sends none), its Workload gets ``QuotaReserved: False``
    (reason ``Pending``, Kueue's message naming the insufficient quota) and no pod is made."""
    rendered, stored = deploy(api, live.namespace, name=f"too-big-{resource}", gang_scheduler="kueue", queue=QUEUE,
                              workers=2, **asks)
    job = rendered.names.job
    assert stored["indexed-job"]["spec"]["suspend"] is True, "suspended by Kueue's webhook at creation"

    def pending() -> dict[str, Any] | None:
        reserved = condition(workload_of(api, live.namespace, job), "QuotaReserved")
        return reserved if reserved is not None and reserved["status"] == "False" else None

    reserved = wait_for(pending, WAIT, "Kueue to mark the Workload pending")
    assert reserved["reason"] == "Pending"
    assert f"insufficient quota for {resource}" in reserved["message"], reserved["message"]
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


def test_the_gpu_quota_admits_what_the_gpu_nodes_can_run_and_no_more(api: client.ApiClient, live: LiveKueue) -> None:
    """The GPU ClusterQueue quotes the GPUs the GPU nodes advertise. A service job of one GPU per pod on every GPU
    is admitted: Kueue puts its flavor's node label in each pod's ``nodeSelector`` (v0.19.2
    ``pkg/podset/podset.go``, ``FromAssignment``/``Merge``) and the scheduler binds one pod per GPU node. A second
    one-GPU job meanwhile stays unadmitted (``QuotaReserved: False``, ``Pending``, Kueue's message naming the GPU
    quota of flavor ``gpu``: ``pkg/scheduler/flavorassigner/flavorassigner.go``, "insufficient unused quota for ...")
    and none of its pods is bound (Kueue's ``kueue.x-k8s.io/admission`` scheduling gate,
    ``pkg/controller/jobs/pod/constants/constants.go``, and, with the TopologyAwareScheduling feature on as it is
    by default, ``kueue.x-k8s.io/topology`` too: ``pod_webhook.go``, ``Default``; ``pod_controller.go``'s
    ``prepare`` lifts both on an admission without topology); once the
    first job is deleted the second is admitted and bound to a GPU node. The StatefulSet's pods stay Running on
    kwok, where a Job's would succeed at once and free the quota."""
    namespace = live.namespace
    first, _ = deploy(api, namespace, name="gpus-a", mode="service", workers=GPUS, gpus=1, gang_scheduler="kueue",
                      queue=GPU_QUEUE)
    bound = wait_for_pods(api, namespace, selector(first), GPUS)
    assert sorted(p.spec.node_name for p in bound) == sorted(nodes.GPU_NODES)
    assert [(p.spec.node_selector or {}).get(GPU_NODE_LABEL) for p in bound] == ["true"] * GPUS
    admitted = condition(workload_of(api, namespace, first.names.job, "StatefulSet"), "Admitted")
    assert admitted is not None and admitted["status"] == "True", admitted

    second, _ = deploy(api, namespace, name="gpus-b", mode="service", workers=1, gpus=1, gang_scheduler="kueue",
                       queue=GPU_QUEUE)

    def pending() -> dict[str, Any] | None:
        reserved = condition(workload_of(api, namespace, second.names.job, "StatefulSet"), "QuotaReserved")
        return reserved if reserved is not None and reserved["status"] == "False" else None

    reserved = wait_for(pending, WAIT, "Kueue to leave the second GPU job pending")
    assert reserved["reason"] == "Pending"
    assert f"quota for {GPU_RESOURCE} in flavor gpu" in reserved["message"], reserved["message"]
    waiting = wait_for_pods(api, namespace, selector(second), 1, bound=False)
    assert [p.spec.node_name for p in waiting] == [None]
    assert sorted(g.name for p in waiting for g in p.spec.scheduling_gates or []) == [
        "kueue.x-k8s.io/admission", "kueue.x-k8s.io/topology"]

    client.AppsV1Api(api).delete_namespaced_stateful_set(first.names.job, namespace)
    (moved,) = wait_for_pods(api, namespace, selector(second), 1)
    assert moved.spec.node_name in nodes.GPU_NODES


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
