"""Whether a cluster can run a job (``components.job.fit``): each rule against hand-built capabilities,
for clusters a program describes itself (the stack-level cases are in ``test_stack_config.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from components.capabilities import ClusterCapabilities, KueueCapabilities, KueueClusterQueue, KueueFlavor
from components.errors import InvalidJobArgs
from components.job.fit import check_fits
from tests.components.componenttest import job_args

pytestmark = pytest.mark.unit

FLAVORS = (
    KueueFlavor("cpu", {"pool": "cpu"}, {"cpu": "8", "memory": "32Gi"}),
    KueueFlavor("big", {"pool": "big"}, {"cpu": "64", "memory": "16Gi"}),
)
KUEUE = KueueCapabilities(
    frameworks=frozenset({"batch/job", "statefulset", "kubeflow.org/pytorchjob"}),
    cluster_queues={"shared": KueueClusterQueue("shared", FLAVORS),
                    "pods": KueueClusterQueue("pods", (KueueFlavor("any", {}, {"cpu": "100", "pods": "3"}),))},
    local_queues={("ml", "team"): "shared"},
)
CLUSTER = ClusterCapabilities(training_operator=True, kueue=KUEUE)


def refused(field: str, fragment: str, cluster: ClusterCapabilities = CLUSTER, **overrides: Any) -> InvalidJobArgs:
    with pytest.raises(InvalidJobArgs) as caught:
        check_fits(job_args(**overrides), cluster)
    assert caught.value.field == field
    assert fragment in str(caught.value)
    return caught.value


def kueue_job(**overrides: Any) -> dict[str, Any]:
    return {"gang_scheduler": "kueue", "queue": "team", "namespace": "ml", **overrides}


def test_a_job_that_fits_passes() -> None:
    check_fits(job_args(**kueue_job(cpus=2, memory="4Gi")), CLUSTER)
    check_fits(job_args(**kueue_job(cpus=30, memory="4Gi")), CLUSTER)  # the big flavor holds it


def test_a_disabled_kueue_integration_is_refused() -> None:
    """kubernetes-sigs/kueue v0.19.2 ``pkg/controller/jobframework/setup.go``: an integration missing from
    ``integrations.frameworks`` gets a no-op webhook (``WithNoopWebhook``), so its workloads are never
    suspended and run at once, ignoring their queue."""
    cluster = ClusterCapabilities(kueue=KueueCapabilities(frameworks=frozenset({"batch/job"}),
                                                          local_queues=KUEUE.local_queues,
                                                          cluster_queues=KUEUE.cluster_queues))
    refused("gang_scheduler", "Kueue's statefulset integration is off", cluster, mode="service", **kueue_job())
    check_fits(job_args(**kueue_job()), cluster)


def test_a_flavor_the_pods_node_selector_excludes_is_not_counted() -> None:
    """kubernetes-sigs/kueue v0.19.2 ``pkg/scheduler/flavorassigner/flavorassigner.go``
    (``checkFlavorForPodSets``): a flavor whose ``nodeLabels`` the pod's node selector contradicts does
    not match, so only the flavors the pods may land on count toward the quota."""
    refused("cpus", "more than any usable flavor of ClusterQueue 'shared' holds (cpu: 8, big: 64)",
            **kueue_job(cpus=30, node_selector={"pool": "cpu"}))


def test_kueue_admits_a_job_from_one_flavor() -> None:
    """kubernetes-sigs/kueue v0.19.2 ``pkg/scheduler/flavorassigner/flavorassigner.go``
    (``findFlavorForPodSets``): every resource of a resource group is assigned from the same flavor, so
    CPU that only one flavor holds and memory that only another holds never fit together."""
    refused("workers", "no single flavor of ClusterQueue 'shared' holds everything the job requests "
            "(cpu 30, memory 10Gi per pod x 2 pods)", **kueue_job(cpus=30, memory="10Gi"))


def test_a_queue_that_counts_pods_counts_the_jobs_pods() -> None:
    """kubernetes-sigs/kueue v0.19.2 ``pkg/scheduler/flavorassigner/flavorassigner.go`` (``assignFlavors``):
    when the ClusterQueue covers ``pods``, each pod set requests its pod count."""
    check_fits(job_args(gang_scheduler="kueue", cluster_queue="pods", workers=3), CLUSTER)
    refused("workers", "the job requests 4 pods, more than any usable flavor of ClusterQueue 'pods' holds (any: 3)",
            gang_scheduler="kueue", cluster_queue="pods", workers=4)


def test_a_local_queue_is_looked_up_in_the_jobs_namespace() -> None:
    refused("queue", "no LocalQueue 'team' in namespace 'default' (configured: ml/team)",
            gang_scheduler="kueue", queue="team")
    refused("cluster_queue", "no ClusterQueue 'gpus' on the cluster", gang_scheduler="kueue", cluster_queue="gpus")


@pytest.mark.parametrize(
    ("operator", "gang", "fits"),
    [("none", "none", True), ("none", "kueue", True), ("none", "volcano", False), ("volcano", "volcano", True),
     ("volcano", "none", False), ("volcano", "kueue", False), ("scheduler-plugins", "scheduler-plugins", True),
     ("scheduler-plugins", "volcano", False)],
)
def test_a_pytorchjobs_gang_scheduler_is_the_operators(operator: str, gang: str, fits: bool) -> None:
    """kubeflow/trainer v1.9.4 ``cmd/training-operator.v1/main.go`` and ``pkg/controller.v1/common/job.go``:
    the operator's ``--gang-scheduler-name`` applies to every PyTorchJob it runs; unset, it makes no
    PodGroup for any."""
    cluster = ClusterCapabilities(training_operator=True, operator_gang_scheduler=operator, volcano_queues=("default",),
                                  scheduler_plugins=True, kueue=KUEUE)
    overrides = {"backend": "pytorchjob", "gang_scheduler": gang}
    if gang == "kueue":
        overrides.update(queue="team", namespace="ml")
    if fits:
        check_fits(job_args(**overrides), cluster)
    else:
        refused("gang_scheduler", "the training operator", cluster, **overrides)


def test_gpu_jobs_need_gpu_nodes_that_advertise_their_gpus() -> None:
    refused("gpus", "the cluster has no GPU nodes", ClusterCapabilities(), gpus=1)
    refused("gpus", "no device plugin advertises", ClusterCapabilities(gpu_nodes=True), gpus=1)
    check_fits(job_args(gpus=1), ClusterCapabilities(gpu_nodes=True, gpu_resources=True))
