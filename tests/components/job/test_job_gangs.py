"""Gang scheduling and queueing: the PodGroups, scheduler names and Kueue labels and queues a job renders."""

from __future__ import annotations

import pytest

from tests.components.job.jobrender import (
    BACKENDS,
    kind_of,
    render,
    templates,
    within_kueue,
    workload,
)

pytestmark = pytest.mark.unit


def test_volcano_podgroup_and_pods() -> None:
    job = render(gang_scheduler="volcano", queue="research", workers=4, quorum_workers=3, min_workers=3,
                 max_workers=4)
    group = kind_of(job, "PodGroup")
    assert group["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    assert group["metadata"]["name"] == "demo"
    assert group["spec"] == {"minMember": 3, "queue": "research"}
    template = templates(job)[0]
    assert template["spec"]["schedulerName"] == "volcano"
    assert template["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "demo"
    assert workload(job)["metadata"]["annotations"] == {"pulumi.com/waitFor": "jsonpath={.metadata.uid}"}


def test_scheduler_plugins_podgroup_and_pods() -> None:
    job = render(gang_scheduler="scheduler-plugins", quorum_timeout=120.5, mode="service")
    group = kind_of(job, "PodGroup")
    assert group["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    assert group["spec"] == {"minMember": 2, "scheduleTimeoutSeconds": 121}
    template = templates(job)[0]
    assert template["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
    assert template["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "demo"
    assert workload(job)["metadata"]["annotations"] == {"pulumi.com/waitFor": "jsonpath={.metadata.uid}"}


def test_custom_scheduler_name_wins() -> None:
    job = render(gang_scheduler="scheduler-plugins", scheduler_name="default-scheduler")
    assert templates(job)[0]["spec"]["schedulerName"] == "default-scheduler"


@pytest.mark.parametrize("backend", BACKENDS)
def test_kueue_labels_the_workload(backend: str) -> None:
    overrides = within_kueue({**BACKENDS[backend][0], "gang_scheduler": "kueue", "queue": "team-a"})
    job = render(**overrides)
    assert workload(job)["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert "suspend" not in workload(job)["spec"], "Kueue's webhook suspends; Pulumi must not fight it"
    assert "LocalQueue" not in {m.body["kind"] for m in job.manifests}


def test_kueue_cluster_queue_gets_its_own_local_queue() -> None:
    job = render(gang_scheduler="kueue", cluster_queue="gpu-pool", namespace="research")
    queue = kind_of(job, "LocalQueue")
    assert queue["metadata"] == {**queue["metadata"], "name": "demo", "namespace": "research"}
    assert queue["spec"] == {"clusterQueue": "gpu-pool"}
    assert workload(job)["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "demo"
