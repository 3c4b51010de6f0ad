"""Kueue's TrainJob integration, live (issue 24, item 2): a ``backend="trainjob"`` DistributedJob with
``gang_scheduler="kueue"`` carries only the queue label on its TrainJob (``components/job/trainjob.py``), and Kueue,
the Trainer and JobSet do the rest: Kueue's webhook creates the TrainJob suspended, its Workload waits for quota,
and once admitted the TrainJob is unsuspended and the Trainer makes its JobSet, JobSet its Job, the Job controller
the pods. One over the quota stays suspended with Kueue's reason and no pod of it runs.

The managers are the real ones, built from their Go modules at the add-ons' releases: Kueue v0.19.2 with the
manager config the ``Kueue`` add-on renders (its default frameworks, the chart's, include
``trainer.kubeflow.org/trainjob``), the Trainer v2.3.0 and JobSet v0.12.0 with theirs, each with webhooks for the
test's namespace alone (``tests/cluster/controllers.py``). The rules, read in kubernetes-sigs/kueue v0.19.2
``pkg/controller/jobs/trainjob/``: ``trainjob_webhook.go`` (``Default``: a TrainJob with a queue name is suspended
and gets a runtime patch of Kueue's own manager, beside trainplane's); ``trainjob_controller.go`` (``PodSets``: the
Workload's pod sets are those of the JobSet the Trainer's runtime framework, linked into Kueue, builds of the
TrainJob and its ClusterTrainingRuntime, trainplane's runtime patch merged; ``RunWithPodSetsInfo``: on admission
Kueue fills its runtime patch with the flavor's node selectors and tolerations and sets ``suspend: false``).

Not collected by a plain ``pytest``: Kueue and the Trainer are not part of CI's build (their cold builds are in
``testbed/cluster/kueue.py`` and docs/stacks.md). Run it by path:
``.venv/bin/python -m pytest -q tests/cluster/live_kueue_trainjob.py`` (the first run builds both:
``python -m testbed.cluster build --with trainer``; Kueue builds on first use).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, dynamic

from components.addons.kueue import KueueArgs
from components.addons.trainer_runtime import TERMINATION_GRACE_SECONDS
from components.addons.versions import TRAINER_API
from components.job.bundle import build_bundle
from components.job.render import RenderedJob, render_job
from components.job.trainjob import GRACE_FIELD, RUNTIME_PATCH_MANAGER
from components.stack.config import parse_kueue
from testbed.cluster.lifecycle import Cluster
from testbed.cluster.waiting import wait_for
from tests.cluster.controllers import (
    LiveKueue,
    condition,
    kueue_crds,
    running_kueue,
    trainer_crds,
    trainer_managers,
    workload_of,
)
from tests.cluster.kube import WAIT, create, pods, wait_for_pods
from tests.cluster.live_trainer import jobset
from tests.cluster.test_workloads import selector
from tests.components.componenttest import TOKEN, job_args

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1800)]

QUEUE = "team"
KUEUE_PATCH_MANAGER = "kueue.x-k8s.io/manager"
"""Kueue's runtime patch's manager (v0.19.2 ``pkg/controller/jobs/trainjob``, ``runtimePatchManagerName``)."""


def addon_args(namespace: str) -> KueueArgs:
    """A stack's ``trainplane:kueue``: a ClusterQueue of 4 CPUs and 16 GiB on the ``default`` flavor, a LocalQueue
    for it in ``namespace``; the frameworks left to the add-on's default."""
    return parse_kueue({
        "flavors": [{"name": "default"}],
        "clusterQueues": [{"name": f"cq-{namespace}", "quotas": {"default": {"cpu": "4", "memory": "16Gi"}}}],
        "localQueues": [{"name": QUEUE, "namespace": namespace, "clusterQueue": f"cq-{namespace}"}]})


@pytest.fixture(scope="module")
def live(cluster: Cluster, api: client.ApiClient) -> Iterator[LiveKueue]:
    """The Trainer's and Kueue's CRDs (the TrainJob kind exists before Kueue starts, so its integration is on),
    Kueue's manager and queues for one namespace, then the Trainer's and JobSet's managers for it."""
    namespace = f"kueue-tj-{uuid.uuid4().hex[:8]}"
    with (kueue_crds(api), trainer_crds(api), running_kueue(cluster, api, namespace, addon_args(namespace)) as running,
          trainer_managers(cluster, api, namespace)):
        yield running


def queued(api: client.ApiClient, namespace: str, name: str, **overrides: Any) -> tuple[RenderedJob, dict[str, Any]]:
    """Render job ``name`` (a queued TrainJob) into ``namespace`` and create its objects; the stored TrainJob.
    Unlike ``test_workloads.deploy`` the server's copy is not held to the sent one: Kueue's webhook adds
    ``suspend`` and a runtime patch (the tests check both)."""
    rendered = render_job(name, job_args(namespace=namespace, backend="trainjob", gang_scheduler="kueue", queue=QUEUE,
                                         num_proc=1, **overrides), TOKEN, build_bundle())
    stored = {m.role: create(api, m.body) for m in rendered.manifests}
    return rendered, stored["trainjob"]


def trainjob(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    resource = dynamic.DynamicClient(api).resources.get(api_version=TRAINER_API, kind="TrainJob")
    return dict(resource.get(name=name, namespace=namespace).to_dict())


def test_a_queued_trainjob_is_suspended_until_kueue_admits_it_then_the_trainer_makes_its_pods(
        api: client.ApiClient, live: LiveKueue) -> None:
    """Two nodes of 1 CPU fit the quota: the TrainJob is stored suspended (trainplane sends no ``suspend``),
    Kueue admits a Workload owned by it with one pod set of two pods, unsuspends it, and the Trainer's JobSet
    leads to two pods."""
    rendered, stored = queued(api, live.namespace, "tj-fits", workers=2, cpus=1)
    name = rendered.names.job
    sent = next(m.body for m in rendered.manifests if m.role == "trainjob")["spec"]
    assert "suspend" not in sent
    assert stored["spec"]["suspend"] is True, "suspended by Kueue's webhook at creation"
    managers = [patch["manager"] for patch in stored["spec"]["runtimePatches"]]
    assert managers == [RUNTIME_PATCH_MANAGER, KUEUE_PATCH_MANAGER], managers
    kept = {k: v for k, v in stored["spec"]["runtimePatches"][0].items() if k != "time"}  # stamped at admission
    assert kept == sent["runtimePatches"][0]

    def admitted() -> dict[str, Any] | None:
        workload = workload_of(api, live.namespace, name, kind="TrainJob")
        found = condition(workload, "Admitted")
        return workload if found is not None and found["status"] == "True" else None

    workload = wait_for(admitted, WAIT, "Kueue to admit the TrainJob's Workload")
    assert sum(p["count"] for p in workload["spec"]["podSets"]) == 2, workload["spec"]["podSets"]
    wait_for(lambda: trainjob(api, live.namespace, name)["spec"].get("suspend") is False, WAIT,
             "Kueue to unsuspend the admitted TrainJob")
    wait_for(lambda: jobset(api, live.namespace, name), WAIT, "the Trainer to make the JobSet")
    started = wait_for_pods(api, live.namespace, selector(rendered), 2)
    assert {p.spec.termination_grace_period_seconds for p in started} == {TERMINATION_GRACE_SECONDS}, \
        "the runtime's grace period, which Kueue's admission cannot drop"
    after = trainjob(api, live.namespace, name)["spec"]["runtimePatches"]
    assert [p["manager"] for p in after] == [RUNTIME_PATCH_MANAGER, KUEUE_PATCH_MANAGER]
    assert {k: v for k, v in after[0].items() if k != "time"} == sent["runtimePatches"][0], \
        "trainplane's runtime patch kept through admission"


def test_kueue_drops_a_trainjobs_own_grace_period_on_admission_and_jobset_then_refuses_the_trainers_update(
        api: client.ApiClient, live: LiveKueue) -> None:
    """Why ``components.job.trainjob_rules`` refuses a queued TrainJob with its own grace period: one whose
    runtime patch carries ``terminationGracePeriodSeconds`` (set on the sent object here, past the rule) is
    admitted, but the admitted TrainJob's patch has lost the field (Kueue v0.19.2 updates it through the Trainer's
    v2.2.1 types), and the Trainer's rebuild of the suspended JobSet without it is refused by JobSet's webhook as
    an immutable change: the Trainer says ``TrainJobResourcesCreationFailed``, JobSet's validator denied it (the
    event's message is cut short by the API server before the webhook's "field is immutable"), and no pod is
    made."""
    rendered = render_job("tj-grace", job_args(namespace=live.namespace, backend="trainjob", gang_scheduler="kueue",
                                               queue=QUEUE, num_proc=1, workers=2, cpus=1), TOKEN, build_bundle())
    own_grace = TERMINATION_GRACE_SECONDS + 30
    for manifest in rendered.manifests:
        if manifest.role == "trainjob":
            pod_patch = manifest.body["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"][
                "replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
            pod_patch[GRACE_FIELD] = own_grace
        create(api, manifest.body)
    name = rendered.names.job
    wait_for(lambda: condition(workload_of(api, live.namespace, name, kind="TrainJob"), "Admitted"), WAIT,
             "Kueue to admit the TrainJob's Workload")

    def refused() -> list[str] | None:
        events = client.CoreV1Api(api).list_namespaced_event(
            live.namespace, field_selector=f"involvedObject.kind=TrainJob,involvedObject.name={name}").items
        found = [e.message for e in events if e.reason == "TrainJobResourcesCreationFailed"]
        return found or None

    messages = wait_for(refused, WAIT, "the Trainer to report the JobSet update refused")
    assert any('admission webhook "vjobset.kb.io" denied the request' in m for m in messages), messages
    patch = trainjob(api, live.namespace, name)["spec"]["runtimePatches"][0]
    assert GRACE_FIELD not in str(patch), "Kueue's admission dropped the TrainJob's own grace period"
    assert pods(api, live.namespace, selector(rendered)) == []


def test_a_trainjob_over_the_quota_stays_suspended_with_kueues_reason_and_no_pod_runs(
        api: client.ApiClient, live: LiveKueue) -> None:
    """Two nodes of 3 CPUs ask for 6 of the ClusterQueue's 4: the Workload's ``QuotaReserved`` is ``False`` with
    Kueue's ``Pending`` reason naming the CPU quota; the TrainJob stays suspended, and no pod runs."""
    rendered, _ = queued(api, live.namespace, "tj-big", workers=2, cpus=3)
    name = rendered.names.job

    def pending() -> dict[str, Any] | None:
        reserved = condition(workload_of(api, live.namespace, name, kind="TrainJob"), "QuotaReserved")
        return reserved if reserved is not None and reserved["status"] == "False" else None

    reserved = wait_for(pending, WAIT, "Kueue to mark the TrainJob's Workload pending")
    assert reserved["reason"] == "Pending"
    assert "insufficient quota for cpu" in reserved["message"], reserved["message"]
    assert trainjob(api, live.namespace, name)["spec"]["suspend"] is True
    assert pods(api, live.namespace, selector(rendered)) == []
