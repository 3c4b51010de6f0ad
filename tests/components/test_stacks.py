"""Each stack file, run through ``__main__.py`` under Pulumi mocks with its own config: what gets
created, under which parent, with which provider, in which order, and what is exported."""

from __future__ import annotations

import pytest

from components.addons import VolcanoArgs
from components.cluster import EksGpuClusterArgs, ExistingClusterArgs, KindClusterArgs
from components.stack.keys import KEY_TYPES
from tests.components.componenttest import (
    PROJECT,
    STACKS,
    Deployment,
    kube_home,
    project_config,
    run_program,
    stack_config,
    stack_file,
)

pytestmark = pytest.mark.unit

CLUSTER_TYPES = {
    "kind": "trainplane:cluster:KindCluster",
    "eks": "trainplane:cluster:EksGpuCluster",
    "existing": "trainplane:cluster:ExistingCluster",
}
ADDON_TYPES = {
    "device-plugin": "trainplane:index:NvidiaDevicePlugin",
    "training-operator": "trainplane:index:TrainingOperator",
    "volcano": "trainplane:index:Volcano",
    "kueue": "trainplane:index:Kueue",
    "trainer": "trainplane:index:TrainerV2",
}
CRD_GROUPS = {
    "scheduling.volcano.sh": "trainplane:index:Volcano",
    "kueue.x-k8s.io": "trainplane:index:Kueue",
    "kubeflow.org": "trainplane:index:TrainingOperator",
    "trainer.kubeflow.org": "trainplane:index:TrainerV2",
}
"""Which add-on installs the CRDs of each API group."""
INSTALLERS = ("kubernetes:helm.sh/v3:Release", "kubernetes:kustomize/v2:Directory")


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """A HOME with a ~/.kube/config, for the existing stack, which reads kubectl's default kubeconfig."""
    path = kube_home(tmp_path_factory.mktemp("home"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOME", str(path))
        yield path


@pytest.fixture(scope="module", params=STACKS)
def stack(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def deployment(stack, home) -> Deployment:
    """The stack's program, run once per stack."""
    return run_program(stack_config(stack))


def test_the_three_documented_stacks_exist():
    assert set(STACKS) >= {"local", "aws-gpu", "existing"}


def test_stack_creates_its_cluster_add_ons_and_jobs_at_top_level(stack, deployment):
    config = stack_file(stack)

    cluster = deployment.one(CLUSTER_TYPES[config["trainplane:clusterKind"]])
    addons = [deployment.one(ADDON_TYPES[name]) for name in config.get("trainplane:addons", [])]
    jobs = deployment.of_type("trainplane:index:DistributedJob")
    assert sorted(j.name for j in jobs) == sorted(job["name"] for job in config.get("trainplane:jobs", []))
    assert all(deployment.parent_of(r) is None for r in [cluster, *addons, *jobs])
    assert len([r for r in deployment.registrations.values() if r.type in CLUSTER_TYPES.values()]) == 1


def test_every_kubernetes_object_goes_through_the_cluster_provider(deployment):
    provider = deployment.one("pulumi:providers:kubernetes")
    objects = [r for r in deployment.registrations.values() if r.type.startswith("kubernetes:")]

    assert deployment.parent_of(provider).type in CLUSTER_TYPES.values()
    assert objects
    assert all(r.provider.startswith(provider.urn + "::") for r in objects)


def test_every_resource_is_parented_by_a_component_and_named_after_it(deployment):
    for reg in deployment.registrations.values():
        parent = deployment.parent_of(reg)
        if parent is None:
            assert reg.type.startswith("trainplane:")
        elif parent.type.startswith("trainplane:"):
            assert reg.name.startswith(f"{parent.name}-"), (reg.name, parent.name)


def test_add_ons_and_jobs_wait_for_everything_the_cluster_creates(deployment):
    (cluster,) = [r for r in deployment.registrations.values() if r.type in CLUSTER_TYPES.values()]
    cluster_parts = {r.urn for r in deployment.descendants(cluster)}
    dependents = [r for r in deployment.registrations.values() if r.type in ADDON_TYPES.values()]
    dependents += deployment.of_type("trainplane:index:DistributedJob")

    assert cluster_parts
    for reg in dependents:
        assert cluster_parts <= set(reg.dependencies), reg.name


def test_custom_resources_wait_for_the_add_on_that_installs_their_crd(deployment):
    customs = [r for r in deployment.registrations.values() if r.type.split(":")[1].split("/")[0] in CRD_GROUPS]

    for reg in customs:
        owner = deployment.one(CRD_GROUPS[reg.type.split(":")[1].split("/")[0]])
        installers = {r.urn for r in deployment.descendants(owner) if r.type in INSTALLERS}
        assert installers and installers <= set(reg.dependencies), reg.name


def test_nothing_waits_on_gpu_nodes(deployment):
    for release in deployment.of_type("kubernetes:helm.sh/v3:Release"):
        if release.inputs["chart"] == "nvidia-device-plugin":
            assert release.inputs["skipAwait"] is True


def test_stack_exports_a_secret_kubeconfig_and_each_jobs_url_and_secret_token(stack, deployment):
    names = sorted(job["name"] for job in stack_file(stack).get("trainplane:jobs", []))

    assert deployment.outputs["kubeconfig"]
    assert sorted(deployment.outputs["coordinatorUrls"]) == names
    assert all(url.startswith("http://") for url in deployment.outputs["coordinatorUrls"].values())
    assert sorted(deployment.outputs["tokens"]) == names
    assert {"kubeconfig", "tokens"} <= deployment.secret_outputs
    assert "coordinatorUrls" not in deployment.secret_outputs


def test_stack_files_set_only_known_keys(stack):
    for key in stack_file(stack):
        namespace, name = key.split(":", 1)
        assert namespace != PROJECT or name in KEY_TYPES, key


PULUMI_TYPES = {str: "string", int: "integer", bool: "boolean", list: "array"}
UNDECLARED = {"gpuNodeGroups", "kueue", "jobs", "existingStorageClasses", "addonCopies"}
"""Structured keys Pulumi's project config cannot type; components/stack validates them."""


def valid_for_type(decl, value) -> bool:
    """Pulumi's own check of a default against its declared type (workspace.ValidateConfigValue)."""
    kind = decl["type"]
    if kind == "array":
        return isinstance(value, list) and all(valid_for_type(decl["items"], v) for v in value)
    return isinstance(value, {"string": str, "integer": int, "boolean": bool}[kind]) and not (
        kind == "integer" and isinstance(value, bool)
    )


def test_pulumi_yaml_types_every_scalar_and_list_key_with_a_valid_default():
    declared = project_config()

    assert set(declared) == set(KEY_TYPES) - UNDECLARED
    for key, decl in declared.items():
        assert decl["type"] == PULUMI_TYPES[KEY_TYPES[key]], key
        assert valid_for_type(decl, decl["default"]), key
        assert decl["description"], key


@pytest.mark.parametrize(
    ("key", "default"),
    [
        ("clusterName", KindClusterArgs.cluster_name),
        ("kindWorkers", KindClusterArgs.workers),
        ("existingGpuNodes", ExistingClusterArgs.gpu_nodes),
        ("vpcCidr", EksGpuClusterArgs.vpc_cidr),
        ("systemInstanceType", EksGpuClusterArgs.system_instance_type),
        ("systemNodes", EksGpuClusterArgs.system_nodes),
        ("volcanoQueue", VolcanoArgs.queue),
    ],
)
def test_pulumi_yaml_defaults_match_the_component_defaults(key, default):
    assert project_config()[key]["default"] == default


def test_add_ons_come_in_crd_order_when_all_are_installed(home):
    kueue = stack_file("existing")["trainplane:kueue"]
    deployment = run_program(
        stack_config("local", addons=["kueue", "training-operator", "volcano", "device-plugin"], kueue=kueue)
    )
    volcano = deployment.one("trainplane:index:Volcano")
    operator = deployment.one("trainplane:index:TrainingOperator")
    queues = deployment.one("trainplane:index:Kueue")

    def installs(addon):
        return {r.urn for r in deployment.descendants(addon) if r.type in INSTALLERS}

    assert installs(volcano) <= set(operator.dependencies)  # the operator checks the PodGroup CRD at start-up
    assert installs(operator) <= set(queues.dependencies)  # Kueue's PyTorchJob integration needs that CRD
    transforms = deployment.one("kubernetes:kustomize/v2:Directory").transforms
    assert len(transforms) == 2  # webhook-cert drift and --gang-scheduler-name=volcano
