"""Kueue's ``waitForPodsReady.recoveryTimeout``, live (issue 21's first finding): an elastic job under Kueue that
loses one pod keeps its admission and its other pods while the replacement waits, with the manager configuration
the ``Kueue`` add-on renders (``recoveryTimeout: 0s``); with the key left out, as the add-on rendered it before,
Kueue evicts the whole workload once the replacement has waited its ``timeout``.

The rules, read in sigs.k8s.io/kueue v0.19.2:

- ``apis/config/v1beta2/defaults.go``: an unset ``recoveryTimeout`` defaults to ``timeout``;
  ``configuration_types.go``: "Setting to "0s" disables recovery timeout checking", and
  ``pkg/controller/core/core.go`` (``waitForPodsReady``) keeps a recovery timeout only when it is above zero;
- ``pkg/controller/jobframework/reconciler.go`` (``PodsReady`` condition): a workload whose pods were all ready and
  one is not gets ``PodsReady: False`` with reason ``WaitForRecovery``;
- ``pkg/controller/core/workload_controller.go`` (``admittedNotReadyWorkload``): such a workload is evicted
  (``Evicted``, reason ``PodsReadyTimeout``) once it has waited the recovery timeout, if there is one.

The job is a service job (a StatefulSet, Kueue's ``statefulset`` and ``pod`` integrations, which the chart enables):
kwok keeps its pods Running, where it marks a Job's pods Succeeded at once. The replacement is kept waiting by
cordoning the CPU nodes before the pod is deleted. The timeout here is 30 s (``pods_ready_timeout``) so the window
is short; the add-on's default is 600 s.

Both passed on 2026-12-03, with ``live_kueue.py`` (7 passed together).

Not collected by a plain ``pytest`` (it needs Kueue's manager, ``testbed/cluster/kueue.py``). Run it by path:
``.venv/bin/python -m pytest -q tests/cluster/live_kueue_recovery.py``.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client

from components.addons.kueue import ClusterQueueArgs, KueueArgs, LocalQueueArgs, ResourceFlavorArgs, chart_values
from testbed.cluster import nodes
from testbed.cluster.lifecycle import Cluster
from testbed.cluster.waiting import Abort, wait_for
from tests.cluster.controllers import condition, kueue_crds, running_kueue, workload_of
from tests.cluster.kube import WAIT, pods, wait_for_pods
from tests.cluster.test_workloads import deploy, selector

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1800)]

QUEUE = "team"
TIMEOUT = 30
"""Seconds of ``pods_ready_timeout`` (``waitForPodsReady.timeout``) in these tests."""
WORKERS = 3


@pytest.fixture(scope="module")
def crds(api: client.ApiClient) -> Iterator[None]:
    with kueue_crds(api):
        yield


def addon_args(namespace: str) -> KueueArgs:
    """One flavor and queue; every other setting the add-on's default but the ready timeout (:data:`TIMEOUT`)."""
    return KueueArgs(flavors=[ResourceFlavorArgs(name="default")],
                     cluster_queues=[ClusterQueueArgs(name=f"cq-{namespace}",
                                                      quotas={"default": {"cpu": "8", "memory": "32Gi"}})],
                     local_queues=[LocalQueueArgs(name=QUEUE, namespace=namespace, cluster_queue=f"cq-{namespace}")],
                     pods_ready_timeout=TIMEOUT)


def without_recovery_timeout(args: KueueArgs) -> str:
    """The manager config the add-on renders for ``args`` with ``waitForPodsReady.recoveryTimeout`` left out."""
    config = yaml.safe_load(chart_values(args)["managerConfig"]["controllerManagerConfigYaml"])
    del config["waitForPodsReady"]["recoveryTimeout"]
    return yaml.safe_dump(config)


def cordon(api: client.ApiClient, unschedulable: bool) -> None:
    for name in nodes.CPU_NODES:
        client.CoreV1Api(api).patch_node(name, {"spec": {"unschedulable": unschedulable}})


def ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def pods_ready(workload: dict[str, Any] | None, status: str, reason: str | None = None) -> dict[str, Any] | None:
    found = condition(workload, "PodsReady")
    if found is None or found["status"] != status or (reason is not None and found["reason"] != reason):
        return None
    return found


def lose_a_pod(api: client.ApiClient, namespace: str) -> tuple[str, dict[str, str]]:
    """Deploy the elastic service job under the queue, wait until Kueue has it admitted and its pods ready, cordon
    the CPU nodes and delete its last pod; returns the job's name and the other pods' uids by name, once the
    Workload is ``PodsReady: False`` (``WaitForRecovery``)."""
    rendered, _ = deploy(api, namespace, name="elastic", mode="service", workers=WORKERS, min_workers=2,
                         max_workers=WORKERS, cpus=1, gang_scheduler="kueue", queue=QUEUE)
    job = rendered.names.job
    wait_for(lambda: pods_ready(workload_of(api, namespace, job, "StatefulSet"), "True"), WAIT,
             "the Workload's pods to be ready")
    found = wait_for_pods(api, namespace, selector(rendered), WORKERS)
    assert all(ready(p) for p in found)
    lost = f"{job}-{WORKERS - 1}"
    others = {p.metadata.name: p.metadata.uid for p in found if p.metadata.name != lost}
    cordon(api, True)
    client.CoreV1Api(api).delete_namespaced_pod(lost, namespace)
    wait_for(lambda: pods_ready(workload_of(api, namespace, job, "StatefulSet"), "False", "WaitForRecovery"), WAIT,
             "Kueue to see the workload waiting for recovery")
    return job, others


def test_a_lost_pod_under_the_addons_config_keeps_the_admission_and_the_other_pods(
        cluster: Cluster, api: client.ApiClient, crds: None) -> None:
    """With ``recoveryTimeout: 0s`` the workload waits for its replacement three times the ready timeout and
    longer: never evicted, still admitted, the other two pods the same ones; once the nodes take pods again the
    replacement is bound and ready and the Workload is ``PodsReady: True`` again (reason ``Recovered``)."""
    namespace = f"kueue-{uuid.uuid4().hex[:8]}"
    args = addon_args(namespace)
    assert yaml.safe_load(chart_values(args)["managerConfig"]["controllerManagerConfigYaml"])[
        "waitForPodsReady"]["recoveryTimeout"] == "0s"
    with running_kueue(cluster, api, namespace, args):
        try:
            job, others = lose_a_pod(api, namespace)

            def waited_long_enough() -> bool:
                workload = workload_of(api, namespace, job, "StatefulSet")
                evicted = condition(workload, "Evicted")
                if evicted is not None and evicted["status"] == "True":
                    raise Abort(f"Kueue evicted the workload: {evicted}")
                named = f"statefulset.kubernetes.io/pod-name in ({','.join(others)})"
                now = {p.metadata.name: p.metadata.uid for p in pods(api, namespace, named)}
                if now != others:
                    raise Abort(f"the other pods changed: {others} -> {now}")
                waiting = pods_ready(workload, "False", "WaitForRecovery")
                if waiting is None:
                    raise Abort(f"the workload is no longer waiting for recovery: {condition(workload, 'PodsReady')}")
                since = datetime.datetime.fromisoformat(waiting["lastTransitionTime"])
                return datetime.datetime.now(datetime.timezone.utc) - since > datetime.timedelta(seconds=3 * TIMEOUT)

            wait_for(waited_long_enough, 3 * TIMEOUT + WAIT, "three ready timeouts of waiting for the replacement")
            admitted = condition(workload_of(api, namespace, job, "StatefulSet"), "Admitted")
            assert admitted is not None and admitted["status"] == "True", admitted
        finally:
            cordon(api, False)
        recovered = wait_for(lambda: pods_ready(workload_of(api, namespace, job, "StatefulSet"), "True"), WAIT,
                             "the replacement to be ready")
        assert recovered["reason"] == "Recovered"


def test_a_lost_pod_without_a_recovery_timeout_gets_the_whole_workload_evicted(
        cluster: Cluster, api: client.ApiClient, crds: None) -> None:
    """The same with the key left out (Kueue's default, the ready timeout): once the replacement has waited that
    long the Workload is ``Evicted`` (``PodsReadyTimeout``) and the two pods that were running are taken down too."""
    namespace = f"kueue-{uuid.uuid4().hex[:8]}"
    args = addon_args(namespace)
    with running_kueue(cluster, api, namespace, args, rendered=without_recovery_timeout(args)):
        try:
            job, others = lose_a_pod(api, namespace)

            def evicted() -> dict[str, Any] | None:
                found = condition(workload_of(api, namespace, job, "StatefulSet"), "Evicted")
                return found if found is not None and found["status"] == "True" else None

            eviction = wait_for(evicted, TIMEOUT + WAIT, "Kueue to evict the workload")
            assert eviction["reason"] == "PodsReadyTimeout", eviction

            def taken_down() -> bool:
                running = {p.metadata.uid for p in pods(api, namespace, "") if p.metadata.deletion_timestamp is None}
                return not running & set(others.values())

            wait_for(taken_down, WAIT, "Kueue to take the running pods down")
        finally:
            cordon(api, False)
