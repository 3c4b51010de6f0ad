"""Gang scheduling, live: scheduler-plugins v0.34.7's scheduler with Coscheduling (built from its Go module,
``testbed/cluster/coscheduling.py``, the second-scheduler chart's profile) places a DistributedJob rendered for
``gang_scheduler="scheduler-plugins"``: with room for all but one of its pods, none is bound; once a node with
room appears, all are.

The scheduler builds (``k8s.io/csi-translation-lib`` at the served v0.34.5, ``versions.SERVED_INSTEAD``; cold
build 998 s wall, 341 s CPU at nice 19 and load 10 to 55) and starts with the chart's plugins
(``test_the_built_scheduler_starts_its_framework_with_the_charts_plugins``, 4 s, no cluster). The tests on the
cluster: on 2026-12-02 the gang tests passed; the operator's
(``test_the_operators_podgroup_gang_schedules_a_pytorchjob``) made the PodGroup and its pods, but they were not
bound within 120 s of the third node appearing. The scheduler's and the operator's logs showed why (later that day):

- Coscheduling requeues a pod it rejected only on a Pod add or a PodGroup add or update (``EventsToRegister`` in
  ``pkg/coscheduling/coscheduling.go``), never on a Node add. A gang whose last rejections are all Coscheduling's
  (``optimistic rejection in PostFilter``, ``rejection in Unreserve``: the pods waiting in ``Permit`` turned away
  when a sibling failed ``Filter``) stays among the unschedulable pods when a node appears, until the queue's
  flush moves pods unschedulable for longer than ``podMaxInUnschedulablePodsDuration`` (5 minutes by default,
  checked every 30 s; k8s.io/kubernetes v1.34.4 ``pkg/scheduler/backend/queue/scheduling_queue.go``,
  ``DefaultPodMaxInUnschedulablePodsDuration`` and ``flushUnschedulablePodsLeftover``; settable only with the
  deprecated ``--pod-max-in-unschedulable-pods-duration`` flag, which the chart does not set). scheduler-plugins'
  PodGroup controller does not requeue on nodes either (``pkg/controllers/podgroup_controller.go``: it patches
  the phase from pod counts). Whether a sibling's last rejection was ``NodeResourcesFit``'s (which a Node add does
  requeue) depends on the order the pods arrive in, which is why the component's gang test was bound at once and
  the operator's (pods created one by one) was not. So "once room appears all are bound" holds within
  :data:`ROOM_TO_BIND` seconds, which both tests allow: a cluster autoscaler's new node may wait that long for a
  scheduler-plugins gang (docs/stacks.md says so).
- The operator's first reconcile logs ``Sync PodGroup ...: unable to get PodGroup after success creation: ...
  not found`` (its informer has not seen the PodGroup it just made; ``pkg/controller.v1/common/scheduling.go``) and
  skips the pods; the next reconcile creates them.

The rules, read in sigs.k8s.io/scheduler-plugins v0.34.7 ``pkg/coscheduling/coscheduling.go`` and
``core/core.go``: a pod labelled ``scheduling.x-k8s.io/pod-group`` waits in ``Permit`` until ``minMember`` pods of its
PodGroup are assumed, and a pod of the group that fails ``Filter`` makes ``PostFilter`` reject the group's waiting
pods, so no pod of an incomplete gang is bound. The PodGroup and the pods' label and ``schedulerName`` are the
component's (``components/job/gang.py``), or, for a PyTorchJob, the training operator's (run with the add-on's
``--gang-scheduler-name``; ``python -m testbed.cluster build --with training-operator``).

Not collected by a plain ``pytest`` (CI does not build scheduler-plugins; the cold build time is in
``testbed/cluster/coscheduling.py``). Run it by path:
``.venv/bin/python -m pytest -q tests/cluster/live_coscheduling.py``.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.utils import parse_quantity

from components.addons.training_operator import TrainingOperatorArgs
from components.addons.versions import SCHEDULER_PLUGINS_SCHEDULER
from components.capabilities import SCHEDULER_PLUGINS
from components.job.gang import COSCHEDULING_API, COSCHEDULING_GROUP_LABEL
from runtime.local.launch_plan import free_port
from testbed.cluster import coscheduling, crds, nodes
from testbed.cluster.build import build_tool
from testbed.cluster.lifecycle import Cluster
from testbed.cluster.waiting import Abort, wait_for
from tests.cluster.controllers import LiveOperator, running_operator
from tests.cluster.kube import WAIT, apply_crd, create, delete_crd, live, pods, wait_for_pods
from tests.cluster.test_workloads import deploy, selector

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1800)]

EXTRA_NODE = "cpu-2"
ROOM_TO_BIND = 5 * 60 + 30 + 60
"""Seconds from a node appearing to a rejected gang's pods all bound, at most: the scheduler's 5-minute
``podMaxInUnschedulablePodsDuration``, its 30-second flush period, and a minute for the pods' backoff and
binding (the module's docstring says why a Node add alone may not requeue them)."""
CPUS = 5
"""Each pod's CPU request: one pod per 8-CPU node, so the two CPU nodes hold all but one of a gang of three."""


@pytest.fixture(scope="module")
def scheduler(cluster: Cluster, api: client.ApiClient) -> Iterator[coscheduling.SecondScheduler]:
    """scheduler-plugins' PodGroup CRD and its scheduler; removed afterwards."""
    crd = apply_crd(api, crds.crd_file("scheduling.x-k8s.io_podgroups.yaml"))
    started = None
    try:
        started = coscheduling.start(cluster.kubeconfig, free_port("127.0.0.1"))
        yield started
    finally:
        if started is not None:
            started.stop()
        delete_crd(api, crd)


def failed_scheduling(api: client.ApiClient, namespace: str) -> set[str]:
    """The pods the second scheduler reported it could not place (``FailedScheduling`` events)."""
    events = client.CoreV1Api(api).list_namespaced_event(namespace).items
    return {e.involved_object.name for e in events
            if e.reason == "FailedScheduling" and (e.reporting_component or e.source.component or "")
            == SCHEDULER_PLUGINS_SCHEDULER}


def test_the_built_scheduler_starts_its_framework_with_the_charts_plugins(tmp_path: Path) -> None:
    """The binary, before any cluster: it accepts the chart's profile and starts the scheduling framework with
    Coscheduling at each extension point the plugin implements (v0.34.7 ``pkg/coscheduling/coscheduling.go``:
    QueueSort, PreFilter, PostFilter, Permit, Reserve), in place of PrioritySort, and NodeResourcesAllocatable.
    Built with its own version (``v0.34.7``) it refused to start at all: the framework read binary version 0.34
    ("emulation version 0.34 is not between [1.31, 0.34.0]", k8s.io/apiserver v0.34.7
    ``pkg/util/compatibility/version.go``)."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "none",
        "clusters": [{"name": "none", "cluster": {"server": f"https://127.0.0.1:{free_port('127.0.0.1')}"}}],
        "users": [{"name": "none", "user": {"token": "none"}}],
        "contexts": [{"name": "none", "context": {"cluster": "none", "user": "none"}}]}))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(
        coscheduling.scheduler_config(coscheduling.chart_values(), kubeconfig)))
    log = tmp_path / "scheduler.log"
    binary = build_tool(coscheduling.SCHEDULER_TOOL)[0] / "scheduler-plugins-scheduler"
    with log.open("wb") as out:
        process = subprocess.Popen([str(binary), f"--config={tmp_path / 'config.yaml'}", "--secure-port=0",
                                    f"--authentication-kubeconfig={kubeconfig}",
                                    f"--authorization-kubeconfig={kubeconfig}", "--v=2"],
                                   stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        def started() -> dict[str, Any] | None:
            if process.poll() is not None:
                raise Abort(f"the scheduler exited {process.returncode}: {log.read_text()[-2000:]}")
            line = next((x for x in log.read_text().splitlines() if "the scheduler starts to work" in x), None)
            return None if line is None else dict(json.loads(line.split("Plugins=", 1)[1].split(" ", 1)[0]))

        plugins = wait_for(started, WAIT, "the scheduler to start its framework")
    finally:
        process.terminate()
        process.wait(30)
    enabled = {point: [p["Name"] for p in found["Enabled"] or []] for point, found in plugins.items()}
    assert sorted(point for point, names in enabled.items() if "Coscheduling" in names) == [
        "Permit", "PostFilter", "PreFilter", "QueueSort", "Reserve"], enabled
    assert "NodeResourcesAllocatable" in enabled["Score"], enabled
    assert "PrioritySort" not in enabled["QueueSort"], enabled


def test_the_profile_is_the_charts(scheduler: coscheduling.SecondScheduler) -> None:
    profile = scheduler.config["profiles"][0]
    assert profile["schedulerName"] == SCHEDULER_PLUGINS_SCHEDULER
    assert profile["plugins"]["multiPoint"]["enabled"] == [{"name": "Coscheduling"},
                                                           {"name": "NodeResourcesAllocatable"}]
    assert profile["plugins"]["multiPoint"]["disabled"] == [{"name": "PrioritySort"}]
    assert profile["pluginConfig"] == [{"name": "Coscheduling", "args": {"permitWaitingTimeSeconds": 10}}]


def free_cpus(api: client.ApiClient, node: str) -> float:
    """The CPUs of ``node`` no pod bound there requests (pods not yet finished)."""
    allocatable = float(nodes.node(node)["status"]["allocatable"]["cpu"])
    bound = client.CoreV1Api(api).list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
    used = sum(float(parse_quantity(c.resources.requests.get("cpu", "0")))
               for p in bound if p.status.phase not in ("Succeeded", "Failed")
               for c in p.spec.containers if c.resources is not None and c.resources.requests)
    return allocatable - used


def room_for_one_each(api: client.ApiClient) -> None:
    """Wait until each CPU node has room for a pod of :data:`CPUS` (an earlier test's pods may still be going with
    their namespace); an 8-CPU node has room for one only."""
    wait_for(lambda: all(free_cpus(api, n) >= CPUS for n in nodes.CPU_NODES), WAIT,
             f"room for one pod of {CPUS} CPUs on each CPU node")


def refused_then_bound(api: client.ApiClient, namespace: str, wanted: str, group: str) -> None:
    """The three pods of ``wanted`` are each refused by the second scheduler and none is bound; once node
    :data:`EXTRA_NODE` appears all three are bound, one per CPU node, within :data:`ROOM_TO_BIND` seconds."""
    core = client.CoreV1Api(api)

    def all_refused() -> list[client.V1Pod] | None:
        found = pods(api, namespace, wanted)
        names = {p.metadata.name for p in found}
        return found if len(found) == 3 and names <= failed_scheduling(api, namespace) else None

    waiting = wait_for(all_refused, WAIT, "the scheduler to refuse each pod of the incomplete gang")
    assert {p.spec.scheduler_name for p in waiting} == {SCHEDULER_PLUGINS_SCHEDULER}
    assert {p.metadata.labels[COSCHEDULING_GROUP_LABEL] for p in waiting} == {group}
    assert [p.metadata.name for p in pods(api, namespace, wanted) if p.spec.node_name] == []
    try:
        create(api, nodes.node(EXTRA_NODE))
        bound = wait_for_pods(api, namespace, wanted, 3, timeout=ROOM_TO_BIND)
        assert sorted(p.spec.node_name for p in bound) == sorted([*nodes.CPU_NODES, EXTRA_NODE])
    finally:
        core.delete_node(EXTRA_NODE)


def test_a_gang_with_room_for_all_but_one_binds_no_pod_until_room_appears_then_all(
        api: client.ApiClient, namespace: str, scheduler: coscheduling.SecondScheduler) -> None:
    room_for_one_each(api)
    rendered, stored = deploy(api, namespace, workers=3, cpus=CPUS, gang_scheduler="scheduler-plugins")
    group = stored["podgroup"]
    assert group["spec"]["minMember"] == 3
    refused_then_bound(api, namespace, selector(rendered), group["metadata"]["name"])


@pytest.fixture(scope="module")
def gang_operator(cluster: Cluster, api: client.ApiClient,
                  scheduler: coscheduling.SecondScheduler) -> Iterator[LiveOperator]:
    """The training operator with the flag the add-on renders for scheduler-plugins
    (``TrainingOperatorArgs.for_gang_scheduler``), started once the PodGroup CRD is in place."""
    flag = TrainingOperatorArgs.for_gang_scheduler(SCHEDULER_PLUGINS).gang_scheduler_name
    with running_operator(cluster, api, flag) as running:
        yield running


def test_the_operators_podgroup_gang_schedules_a_pytorchjob(api: client.ApiClient, gang_operator: LiveOperator) -> None:
    """A PyTorchJob rendered for ``gang_scheduler="scheduler-plugins"`` carries only ``runPolicy.schedulingPolicy``
    (the component renders no PodGroup for it); the operator, run with ``--gang-scheduler-name`` as the add-on
    renders it, creates the PodGroup and gangs the pods, read in kubeflow/trainer (training-operator) v1.9.4:
    ``pkg/controller.v1/common/job.go`` (``ReconcileJobs``: a PodGroup named after the job, owned by it, with
    ``minMember`` = ``schedulingPolicy.minAvailable``, ``minResources`` the requests of that many pods
    (``CalcPGMinResources``) and its ``scheduleTimeoutSeconds``; pods made at once, ``DelayPodCreationDueToPodGroup``
    is false for scheduler-plugins) and ``pkg/controller.v1/control/podgroup_control.go``
    (``DecoratePodTemplateSpec``: each pod's ``schedulerName`` is the flag's, its ``scheduling.x-k8s.io/pod-group``
    label the job's name). Then the same as above: with room for two of the three pods none is bound; once the
    third CPU node appears all three are."""
    room_for_one_each(api)
    namespace = gang_operator.namespace
    rendered, stored = deploy(api, namespace, name="gang", backend="pytorchjob", workers=3, cpus=CPUS,
                              gang_scheduler="scheduler-plugins")
    assert "podgroup" not in stored
    job = stored["pytorchjob"]
    policy = job["spec"]["runPolicy"]["schedulingPolicy"]
    assert policy["minAvailable"] == 3
    name = job["metadata"]["name"]
    body = {"apiVersion": COSCHEDULING_API, "kind": "PodGroup", "metadata": {"name": name, "namespace": namespace}}
    group = wait_for(lambda: live(api, body), WAIT, "the operator's PodGroup")
    assert [(o["kind"], o["uid"]) for o in group["metadata"]["ownerReferences"]] == [("PyTorchJob",
                                                                                      job["metadata"]["uid"])]
    assert group["spec"]["minMember"] == 3
    assert parse_quantity(group["spec"]["minResources"]["cpu"]) == 3 * CPUS
    assert group["spec"]["scheduleTimeoutSeconds"] == policy["scheduleTimeoutSeconds"]
    refused_then_bound(api, namespace, selector(rendered), name)
