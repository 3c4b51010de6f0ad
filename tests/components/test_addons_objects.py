"""Objects the add-ons render themselves (Volcano Queue, Kueue ResourceFlavor / ClusterQueue /
LocalQueue), validated against the published CRDs, and the Kueue argument checks."""

from __future__ import annotations

import jsonschema
import pytest

from components.addons import ClusterQueueArgs, KueueArgs, LocalQueueArgs, ResourceFlavorArgs, VolcanoArgs
from components.addons.kueue import cluster_queue, local_queue, resource_flavor
from components.addons.volcano import volcano_queue
from components.errors import ArgumentError
from runtime.agent import contract
from tests.components.schemacheck import validate_manifest

pytestmark = pytest.mark.unit

GPU_FLAVOR = ResourceFlavorArgs(name="gpu", node_labels={contract.GPU_NODE_LABEL: "true"})
QUEUE = ClusterQueueArgs(
    name="training",
    quotas={"cpu-only": {"cpu": "8", "memory": "32Gi"}, "gpu": {"cpu": 16, "memory": "64Gi"}},
)


def test_volcano_queue_matches_the_crd_and_is_reclaimable():
    queue = volcano_queue(VolcanoArgs(queue="research", queue_weight=3))

    validate_manifest(queue)
    assert queue["metadata"]["name"] == "research"
    assert queue["spec"] == {"weight": 3, "reclaimable": True}


@pytest.mark.parametrize(
    "obj",
    [
        resource_flavor(ResourceFlavorArgs(name="cpu-only")),
        resource_flavor(GPU_FLAVOR),
        cluster_queue(QUEUE),
        local_queue(LocalQueueArgs(name="team", namespace="ml", cluster_queue="training")),
    ],
    ids=lambda obj: obj["kind"] + "/" + obj["metadata"]["name"],
)
def test_kueue_objects_match_the_v1beta2_crds(obj):
    assert obj["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    validate_manifest(obj)


def test_cluster_queue_admits_every_namespace_with_one_group_over_all_quoted_resources():
    spec = cluster_queue(QUEUE)["spec"]

    assert spec["namespaceSelector"] == {}
    (group,) = spec["resourceGroups"]
    assert group["coveredResources"] == ["cpu", "memory"]
    assert group["flavors"] == [
        {
            "name": "cpu-only",
            "resources": [{"name": "cpu", "nominalQuota": "8"}, {"name": "memory", "nominalQuota": "32Gi"}],
        },
        {
            "name": "gpu",
            "resources": [{"name": "cpu", "nominalQuota": 16}, {"name": "memory", "nominalQuota": "64Gi"}],
        },
    ]


def test_gpu_flavor_selects_the_gpu_nodes_the_cluster_labels():
    assert resource_flavor(GPU_FLAVOR)["spec"] == {"nodeLabels": {"nvidia.com/gpu.present": "true"}}


@pytest.mark.parametrize(
    ("build", "field", "message"),
    [
        (lambda: ClusterQueueArgs(name="q", quotas={}), "quotas", "map each flavor"),
        (lambda: ClusterQueueArgs(name="q", quotas={"f": {"cpu": "lots"}}), 'quotas["f"]["cpu"]', "quantity"),
        (lambda: ClusterQueueArgs(name="q", quotas={"f": {"cpu": True}}), 'quotas["f"]["cpu"]', "quantity"),
        (lambda: ClusterQueueArgs(name="q", quotas={"f": {"cpu": "-8"}}), 'quotas["f"]["cpu"]', "quantity"),
        (
            lambda: ClusterQueueArgs(name="q", quotas={"a": {"cpu": 1}, "b": {"memory": "1Gi"}}),
            'quotas["b"]',
            r"same resources as the other flavors: \['cpu'\]",
        ),
        (lambda: ResourceFlavorArgs(name="f", node_labels={"zone": 1}), "node_labels['zone']", "not a label value"),
        (lambda: LocalQueueArgs(name="q", namespace="ML", cluster_queue="c"), "namespace", "lower-case"),
        (
            lambda: KueueArgs(flavors=[GPU_FLAVOR], cluster_queues=[QUEUE]),
            "cluster_queues[0].quotas",
            "names no defined flavor; use one of gpu",
        ),
        (
            lambda: KueueArgs(
                local_queues=[LocalQueueArgs(name="q", namespace="ml", cluster_queue="missing")]
            ),
            "local_queues[0].cluster_queue",
            "names no defined cluster queue; define the cluster queue first",
        ),
        (lambda: KueueArgs(flavors=[GPU_FLAVOR, GPU_FLAVOR]), "flavors", "its own name"),
        (lambda: VolcanoArgs(queue_weight=0), "queue_weight", ">= 1"),
    ],
)
def test_queue_args_reject_bad_values_naming_the_field(build, field, message):
    with pytest.raises(ArgumentError, match=message) as caught:
        build()
    assert caught.value.field == field


def test_validation_is_strict_and_uses_the_rendered_version():
    queue = cluster_queue(QUEUE)
    queue["spec"]["cohort"] = "shared"  # v1beta1's name; v1beta2 renamed it cohortName

    with pytest.raises(jsonschema.ValidationError, match="cohort"):
        validate_manifest(queue)
