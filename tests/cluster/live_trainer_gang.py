"""The Trainer makes a gang ``backend="trainjob"`` job's PodGroup, and trainplane renders none of its own (issue 24,
items 2 and 5): Kubeflow Trainer v2.3.0's real manager (``testbed/cluster/trainer.py``) with the scheduler-plugins and
Volcano PodGroup CRDs installed before it starts, the add-on's coscheduling and Volcano runtimes, and TrainJobs
rendered by ``render_job`` with ``gang_scheduler`` set. The pods name a scheduler that does not run here, so they
stay Pending: only the PodGroups and the pods' specs are checked.

Run it by path (it needs ``build --with trainer``):
``.venv/bin/python -m pytest -q tests/cluster/live_trainer_gang.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client, dynamic

from components.addons.trainer_runtime import SCHEDULE_TIMEOUT_SECONDS, SCHEDULER_NAMES, cluster_training_runtime
from components.addons.versions import TRAINER_API
from runtime.agent import contract
from testbed.cluster.lifecycle import Cluster
from testbed.cluster.waiting import wait_for
from tests.cluster import kube
from tests.cluster.kube import WAIT, create, wait_for_pods
from tests.cluster.live_trainer import trainer_namespace
from tests.cluster.test_workloads import deploy, selector

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1200)]

GANG_CRDS = ("scheduling.x-k8s.io_podgroups.yaml", "scheduling.volcano.sh_podgroups.yaml",
             "scheduling.volcano.sh_queues.yaml")
POD_GROUP_API = {"scheduler-plugins": "scheduling.x-k8s.io/v1alpha1", "volcano": "scheduling.volcano.sh/v1beta1"}
COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"
"""sigs.k8s.io/scheduler-plugins v0.35.4-devel (the Trainer's go.mod) ``apis/scheduling/v1alpha1/types.go``,
``PodGroupLabel``."""
VOLCANO_ANNOTATION = "scheduling.k8s.io/group-name"
"""volcano.sh/apis (the Trainer's go.mod) ``pkg/apis/scheduling/v1beta1/labels.go``, ``KubeGroupNameAnnotationKey``."""


@pytest.fixture(scope="module")
def live(cluster: Cluster, api: client.ApiClient) -> Iterator[str]:
    """``trainer_namespace`` with both PodGroup kinds' CRDs installed before the Trainer starts."""
    with trainer_namespace(cluster, api, GANG_CRDS) as namespace:
        yield namespace


@pytest.mark.parametrize("gang", ["scheduler-plugins", "volcano"])
def test_the_trainer_makes_the_podgroup_of_a_gang_trainjob_with_every_pod_as_min_member(
        api: client.ApiClient, live: str, gang: str) -> None:
    """kubeflow/trainer v2.3.0: a runtime's ``podGroupPolicy.coscheduling`` / ``.volcano`` makes the Trainer apply a
    PodGroup named after the TrainJob, owned by it, ``minMember`` the sum of the pod sets' counts (here
    ``numNodes``), with coscheduling's ``scheduleTimeoutSeconds`` (``pkg/runtime/framework/plugins/coscheduling/
    coscheduling.go`` and ``pkg/runtime/framework/plugins/volcano/volcano.go``, ``Build``), and label
    (coscheduling) or annotate (Volcano) each pod with its name (``EnforcePodGroupPolicy``); the pods run on the
    runtime's scheduler (``components.addons.trainer_runtime``). trainplane renders no PodGroup for a TrainJob."""
    runtime = cluster_training_runtime(gang, {contract.LABEL_PART_OF: contract.APP_NAME})
    create(api, runtime)
    try:
        name = f"pg-{uuid.uuid4().hex[:6]}"
        rendered, _ = deploy(api, live, name=name, backend="trainjob", workers=2, num_proc=1, gang_scheduler=gang)
        assert "PodGroup" not in [m.body["kind"] for m in rendered.manifests]
        group = {"apiVersion": POD_GROUP_API[gang], "kind": "PodGroup", "metadata": {"name": name, "namespace": live}}
        made = wait_for(lambda: kube.live(api, group), WAIT, "the Trainer's PodGroup")
        assert made["spec"]["minMember"] == 2
        owners = made["metadata"]["ownerReferences"]
        assert [(o["kind"], o["name"], o["controller"]) for o in owners] == [("TrainJob", name, True)]
        if gang == "scheduler-plugins":
            assert made["spec"]["scheduleTimeoutSeconds"] == SCHEDULE_TIMEOUT_SECONDS
        found = wait_for_pods(api, live, selector(rendered), 2, bound=False)
        for pod in found:
            assert pod.spec.scheduler_name == SCHEDULER_NAMES[gang]
            if gang == "scheduler-plugins":
                assert pod.metadata.labels[COSCHEDULING_LABEL] == name
            else:
                assert pod.metadata.annotations[VOLCANO_ANNOTATION] == name
        dynamic.DynamicClient(api).resources.get(api_version=TRAINER_API, kind="TrainJob").delete(
            name=name, namespace=live)
    finally:
        dynamic.DynamicClient(api).resources.get(api_version=TRAINER_API, kind="ClusterTrainingRuntime").delete(
            name=runtime["metadata"]["name"])
