"""Add-on components under mocks: pinned charts and manifests, await behaviour, the order of the
custom resources after the release that installs their CRD, providers, and the training
operator's transforms."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s
import pytest
import yaml

from components.addons import (
    ClusterQueueArgs,
    Kueue,
    KueueArgs,
    LocalQueueArgs,
    NvidiaDevicePlugin,
    ResourceFlavorArgs,
    TrainingOperator,
    TrainingOperatorArgs,
    Volcano,
    VolcanoArgs,
)
from components.addons.training_operator import with_gang_scheduler
from components.addons.versions import KUEUE, NVIDIA_DEVICE_PLUGIN, VOLCANO
from components.addons.volcano import volcano_queue
from components.cluster import GpuNodeGroupArgs
from components.cluster.eks import gpu_node_group_settings
from components.errors import ArgumentError
from tests.components.componenttest import KUBECONFIG, deploy, kube_home, run_program, stack_config, tolerates

pytestmark = pytest.mark.unit

RELEASE = "kubernetes:helm.sh/v3:Release"
KUEUE_CHART_FRAMEWORKS = [
    "batch/job", "kubeflow.org/mpijob", "ray.io/rayjob", "ray.io/rayservice", "ray.io/raycluster",
    "jobset.x-k8s.io/jobset", "workload.codeflare.dev/appwrapper", "trainer.kubeflow.org/trainjob", "pod",
    "deployment", "statefulset", "leaderworkerset.x-k8s.io/leaderworkerset",
]
"""``integrations.frameworks`` enabled in kubernetes-sigs/kueue v0.19.2 ``charts/kueue/values.yaml``."""


def deploy_addon(build):
    def program():
        provider = k8s.Provider("k8s", kubeconfig=KUBECONFIG)
        build(pulumi.ResourceOptions(provider=provider))
        return {}

    return deploy(program)


def test_device_plugin_is_a_pinned_release_that_does_not_wait_for_gpu_nodes():
    deployment = deploy_addon(lambda opts: NvidiaDevicePlugin("gpu", opts=opts))

    release = deployment.one(RELEASE)
    assert release.parent == deployment.one("trainplane:index:NvidiaDevicePlugin").urn
    assert release.name == "gpu-release"
    assert (release.inputs["chart"], release.inputs["version"]) == ("nvidia-device-plugin", "0.19.0")
    assert release.inputs["repositoryOpts"] == {"repo": "https://nvidia.github.io/k8s-device-plugin"}
    assert release.inputs["skipAwait"] is True
    assert release.provider.startswith(deployment.one("pulumi:providers:kubernetes").urn)


def test_device_plugin_tolerates_the_taint_gpu_node_groups_carry():
    deployment = deploy_addon(lambda opts: NvidiaDevicePlugin("gpu", opts=opts))

    (taint,) = gpu_node_group_settings(GpuNodeGroupArgs(name="g", instance_types=["g5.xlarge"]))["taints"]
    tolerations = deployment.one(RELEASE).inputs["values"]["tolerations"]
    assert any(tolerates(t, taint) for t in tolerations)


def test_volcano_release_waits_and_the_queue_comes_after_it():
    deployment = deploy_addon(lambda opts: Volcano("sched", VolcanoArgs(queue="research"), opts=opts))

    release = deployment.one(RELEASE)
    queue = deployment.one("kubernetes:scheduling.volcano.sh/v1beta1:Queue")
    assert (release.inputs["chart"], release.inputs["version"]) == (VOLCANO.chart, "1.15.1")
    assert release.inputs["repositoryOpts"] == {"repo": "https://volcano-sh.github.io/helm-charts"}
    assert release.inputs["namespace"] == "volcano-system" and release.inputs["createNamespace"] is True
    assert not release.inputs.get("skipAwait")
    assert release.urn in queue.dependencies
    assert queue.inputs["spec"] == volcano_queue(VolcanoArgs(queue="research"))["spec"]
    assert queue.provider == release.provider


def test_kueue_creates_flavors_then_cluster_queues_then_local_queues_after_its_release():
    args = KueueArgs(
        flavors=[ResourceFlavorArgs(name="default")],
        cluster_queues=[ClusterQueueArgs(name="shared", quotas={"default": {"cpu": "4"}})],
        local_queues=[LocalQueueArgs(name="team", namespace="ml", cluster_queue="shared")],
    )
    deployment = deploy_addon(lambda opts: Kueue("queues", args, opts=opts))

    release = deployment.one(RELEASE)
    flavor = deployment.one("kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor")
    shared = deployment.one("kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue")
    team = deployment.one("kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue")
    assert (release.inputs["chart"], release.inputs["version"]) == (
        "oci://registry.k8s.io/kueue/charts/kueue",
        "0.19.2",
    )
    assert "repositoryOpts" not in release.inputs
    assert release.urn in flavor.dependencies
    assert {release.urn, flavor.urn} <= set(shared.dependencies)
    assert {release.urn, shared.urn} <= set(team.dependencies)
    assert team.inputs["metadata"]["namespace"] == "ml"


def test_pinned_charts_are_exact_versions():
    for chart in (NVIDIA_DEVICE_PLUGIN, VOLCANO, KUEUE):
        assert chart.version.replace(".", "").isdigit()


def transformed(transforms, type_, props):
    args = pulumi.ResourceTransformArgs(
        custom=True, type_=type_, name="x", props=props, opts=pulumi.ResourceOptions()
    )
    results = [t(args) for t in transforms]
    return [r for r in results if r is not None]


OPERATOR = {
    "metadata": {"name": "training-operator", "namespace": "kubeflow"},
    "spec": {"template": {"spec": {"containers": [{"name": "training-operator", "command": ["/manager"]}]}}},
}


def test_training_operator_applies_the_pinned_standalone_overlay():
    deployment = deploy_addon(lambda opts: TrainingOperator("kfto", opts=opts))

    manifests = deployment.one("kubernetes:kustomize/v2:Directory")
    assert manifests.remote and manifests.parent == deployment.one("trainplane:index:TrainingOperator").urn
    assert manifests.inputs["directory"] == (
        "https://github.com/kubeflow/trainer//manifests/overlays/standalone?ref=v1.9.4"
    )


@pytest.mark.parametrize(
    ("type_", "name", "ignored"),
    [
        ("kubernetes:core/v1:Secret", "training-operator-webhook-cert", ["data", "stringData"]),
        (
            "kubernetes:admissionregistration.k8s.io/v1:ValidatingWebhookConfiguration",
            "validator.training-operator.kubeflow.org",
            ["webhooks[*].clientConfig.caBundle"],
        ),
    ],
)
def test_training_operator_ignores_the_webhook_cert_it_writes_itself(type_, name, ignored):
    deployment = deploy_addon(lambda opts: TrainingOperator("kfto", opts=opts))
    transforms = deployment.one("kubernetes:kustomize/v2:Directory").transforms

    (result,) = transformed(transforms, type_, {"metadata": {"name": name}})
    assert result.opts.ignore_changes == ignored
    assert transformed(transforms, type_, {"metadata": {"name": "other"}}) == []


def test_training_operator_gang_scheduler_flag_follows_the_installed_scheduler():
    with_volcano = deploy_addon(
        lambda opts: TrainingOperator("kfto", TrainingOperatorArgs(gang_scheduler_name="volcano"), opts=opts)
    )
    without = deploy_addon(lambda opts: TrainingOperator("kfto", opts=opts))
    deployment_type = "kubernetes:apps/v1:Deployment"

    (result,) = transformed(
        with_volcano.one("kubernetes:kustomize/v2:Directory").transforms, deployment_type, OPERATOR
    )
    (container,) = result.props["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["--gang-scheduler-name=volcano"]
    assert (
        transformed(without.one("kubernetes:kustomize/v2:Directory").transforms, deployment_type, OPERATOR)
        == []
    )


def test_gang_scheduler_flag_replaces_an_earlier_value_and_leaves_the_input_alone():
    deployment = with_gang_scheduler(OPERATOR, "scheduler-plugins-scheduler")
    again = with_gang_scheduler(deployment, "volcano")

    assert again["spec"]["template"]["spec"]["containers"][0]["args"] == ["--gang-scheduler-name=volcano"]
    assert "args" not in OPERATOR["spec"]["template"]["spec"]["containers"][0]


# --- upstream rules: what the add-ons must configure ---------------------------------------------


def kueue_manager_config(deployment):
    """The manager config the Kueue release hands the chart (one YAML string, used whole)."""
    (release,) = [r for r in deployment.of_type(RELEASE) if r.inputs["chart"] == KUEUE.chart]
    return yaml.safe_load(release.inputs["values"]["managerConfig"]["controllerManagerConfigYaml"])


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A HOME with a ~/.kube/config: the existing stack reads kubectl's default kubeconfig."""
    monkeypatch.setenv("HOME", str(kube_home(tmp_path)))
    return tmp_path


def test_kueue_queues_pytorchjobs_when_the_stack_installs_the_training_operator(home):
    """kubernetes-sigs/kueue v0.19.2 ``charts/kueue/values.yaml`` (and
    ``config/components/manager/controller_manager_config.yaml``): ``kubeflow.org/pytorchjob`` is commented
    out of ``integrations.frameworks``; ``pkg/controller/jobframework/setup.go`` gives a disabled
    integration a no-op webhook, so its jobs run at once and ignore their queue. The chart takes the
    config as one string and uses it whole (``charts/kueue/templates/manager/manager-config.yaml``), so
    the chart's other settings and integrations must be rendered too."""
    config = kueue_manager_config(run_program(stack_config("existing")))

    assert "kubeflow.org/pytorchjob" in config["integrations"]["frameworks"]
    assert set(KUEUE_CHART_FRAMEWORKS) <= set(config["integrations"]["frameworks"])
    assert {k: config[k] for k in ("apiVersion", "kind", "health", "metrics", "webhook", "leaderElection")} == {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
    }


def test_kueue_without_the_training_operator_keeps_the_charts_integrations():
    deployment = deploy_addon(lambda opts: Kueue("queues", KueueArgs(), opts=opts))

    assert kueue_manager_config(deployment)["integrations"]["frameworks"] == KUEUE_CHART_FRAMEWORKS


def test_kueue_admission_is_all_or_nothing_with_wait_for_pods_ready():
    """kubernetes-sigs/kueue v0.19.2 ``apis/config/v1beta2/configuration_types.go`` (``WaitForPodsReady``):
    an admitted workload whose pods are not all ready within ``timeout`` is evicted and requeued;
    ``blockAdmission`` admits the next one only when the previous is ready; ``requeuingStrategy.
    backoffLimitCount`` deactivates a workload after that many requeues (null: forever). v0.19 enables it
    by default only behind ``DisableWaitForPodsReady`` (``pkg/features/kube_features.go``: "planned to be
    removed"), with a 30-minute timeout and no blocking (``apis/config/v1beta2/defaults.go``)."""
    deployment = deploy_addon(lambda opts: Kueue("queues", KueueArgs(pods_ready_timeout=420, requeue_limit=2),
                                                 opts=opts))

    assert kueue_manager_config(deployment)["waitForPodsReady"] == {
        "timeout": "420s",
        "recoveryTimeout": "0s",
        "blockAdmission": True,
        "requeuingStrategy": {"timestamp": "Eviction", "backoffLimitCount": 2},
    }


def test_a_local_queue_is_replaced_when_its_cluster_queue_changes():
    """kubernetes-sigs/kueue v0.19.2 ``config/components/crd/bases/kueue.x-k8s.io_localqueues.yaml``:
    ``spec.clusterQueue`` carries ``x-kubernetes-validations: self == oldSelf`` ("field is immutable"),
    so an in-place update is refused; the queue must be deleted and created again."""
    args = KueueArgs(
        flavors=[ResourceFlavorArgs(name="default")],
        cluster_queues=[ClusterQueueArgs(name="shared", quotas={"default": {"cpu": "4"}})],
        local_queues=[LocalQueueArgs(name="team", namespace="ml", cluster_queue="shared")],
    )
    deployment = deploy_addon(lambda opts: Kueue("queues", args, opts=opts))

    team = deployment.one("kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue")
    assert team.replace_on_changes == ["spec.clusterQueue"]
    assert team.delete_before_replace is True
    assert not deployment.one("kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue").replace_on_changes


def test_pulumi_waits_until_the_volcano_queues_are_open():
    """volcano-sh/volcano v1.15.1 ``pkg/webhooks/admission/podgroups/validate/validate_podgroup.go``
    (``checkQueueState``): a PodGroup is refused unless its queue's ``status.state`` is ``Open``, which
    the queue controller sets after the Queue exists; the scheduler creates the ``default`` queue at
    start-up (``pkg/scheduler/cache/cache.go``). pulumi-kubernetes treats custom resources as ready at
    once, so both queues carry ``pulumi.com/waitFor: jsonpath={.status.state}=Open`` (the built-in one
    through a patch that adds only that annotation)."""
    deployment = deploy_addon(lambda opts: Volcano("sched", VolcanoArgs(queue="research"), opts=opts))

    release = deployment.one(RELEASE)
    queue = deployment.one("kubernetes:scheduling.volcano.sh/v1beta1:Queue")
    builtin = deployment.one("kubernetes:scheduling.volcano.sh/v1beta1:QueuePatch")
    for reg in (queue, builtin):
        assert reg.inputs["metadata"]["annotations"] == {"pulumi.com/waitFor": "jsonpath={.status.state}=Open"}
        assert release.urn in reg.dependencies
    assert builtin.inputs["metadata"]["name"] == "default"
    assert "spec" not in builtin.inputs, "the patch changes nothing of Volcano's own queue"


def test_the_local_stacks_podgroup_waits_for_its_open_queue():
    deployment = run_program(stack_config("local"))

    queue = deployment.one("kubernetes:scheduling.volcano.sh/v1beta1:Queue")
    builtin = deployment.one("kubernetes:scheduling.volcano.sh/v1beta1:QueuePatch")
    group = deployment.one("kubernetes:scheduling.volcano.sh/v1beta1:PodGroup")
    assert group.inputs["spec"]["queue"] == queue.inputs["metadata"]["name"]
    assert {queue.urn, builtin.urn} <= set(group.dependencies)
    assert "pulumi.com/waitFor" in queue.inputs["metadata"]["annotations"]


@pytest.mark.parametrize(
    ("setting", "flag"),
    [
        ("scheduler-plugins", ["--gang-scheduler-name=scheduler-plugins-scheduler"]),
        ("volcano", ["--gang-scheduler-name=volcano"]),
    ],
)
def test_the_stack_sets_the_operators_gang_scheduler_it_asks_for(home, setting, flag):
    """kubeflow/trainer v1.9.4 ``cmd/training-operator.v1/main.go``: ``--gang-scheduler-name`` equal to
    ``volcano`` selects Volcano, any other value is taken as a scheduler-plugins scheduler name, and
    without it ``pkg/controller.v1/common/job.go`` creates no PodGroup for any PyTorchJob, so a
    scheduler-plugins gang never forms unless the flag names its scheduler."""
    addons = ["training-operator", "volcano"] if setting == "volcano" else ["training-operator"]
    deployment = run_program(stack_config("existing", addons=addons, kueue=None, jobs=[],
                                          trainingOperatorGangScheduler=setting))

    transforms = deployment.one("kubernetes:kustomize/v2:Directory").transforms
    results = transformed(transforms, "kubernetes:apps/v1:Deployment", OPERATOR)
    (container,) = results[0].props["spec"]["template"]["spec"]["containers"]
    assert container["args"] == flag


@pytest.mark.parametrize(
    ("flag", "gang"),
    [(None, "none"), ("volcano", "volcano"), ("Volcano", "volcano"), ("scheduler-plugins-scheduler",
                                                                    "scheduler-plugins"), ("my-coscheduler",
                                                                                           "scheduler-plugins")],
)
def test_the_operators_gang_scheduler_is_read_as_the_operator_reads_its_flag(flag, gang):
    """kubeflow/trainer v1.9.4 ``cmd/training-operator.v1/main.go``: ``strings.EqualFold(name, "volcano")``
    selects Volcano; any other non-empty name is the scheduler-plugins scheduler's."""
    assert TrainingOperatorArgs(gang_scheduler_name=flag).gang_scheduler == gang


ADDON_MAPPINGS = {
    # As a program in another language passes the arguments: a mapping, every number a float.
    "NvidiaDevicePlugin": (NvidiaDevicePlugin, {"namespace": "gpu-plugins"}),
    "Volcano": (Volcano, {"queue": "research", "queue_weight": 2.0}),
    "TrainingOperator": (TrainingOperator, {"gang_scheduler_name": "volcano"}),
    "Kueue": (Kueue, {"flavors": [{"name": "a100", "node_labels": {"pool": "a100"}}],
                      "cluster_queues": [{"name": "gpu", "quotas": {"a100": {"cpu": 64.0, "nvidia.com/gpu": "8"}}}],
                      "local_queues": [{"name": "team", "namespace": "research", "cluster_queue": "gpu"}],
                      "pods_ready_timeout": 300.0}),
}
ADDON_OUTPUTS = {
    "NvidiaDevicePlugin": {"namespace": "gpu-plugins"},
    "Volcano": {"queue": "research", "namespace": "volcano-system"},
    "TrainingOperator": {"gang_scheduler": "volcano"},
    "Kueue": {"namespace": "kueue-system", "cluster_queues": ["gpu"]},
}


@pytest.mark.parametrize("name", ADDON_MAPPINGS)
def test_an_addon_takes_its_arguments_as_a_mapping_and_keeps_its_former_type_as_an_alias(name):
    """The component provider hands a component a dict of Python names with numbers as floats
    (``components.arguments``); the type token is the package's, aliased from ``trainplane:addons:``."""
    component, inputs = ADDON_MAPPINGS[name]
    outputs = {}

    def program():
        addon = component(name.lower(), inputs)
        outputs.update({key: getattr(addon, key) for key in ADDON_OUTPUTS[name]})
        return outputs

    deployment = deploy(program)
    registered = deployment.one(f"trainplane:index:{name}")
    assert registered.alias_types == [f"trainplane:addons:{name}"]
    assert deployment.outputs == ADDON_OUTPUTS[name]
    if name == "Volcano":
        assert deployment.one("kubernetes:scheduling.volcano.sh/v1beta1:Queue").inputs["spec"]["weight"] == 2
    if name == "Kueue":
        (queue,) = deployment.of_type("kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue")
        quota = queue.inputs["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
        assert {r["name"]: r["nominalQuota"] for r in quota} == {"cpu": 64, "nvidia.com/gpu": "8"}


@pytest.mark.parametrize(
    ("component", "inputs", "field", "fix"),
    [
        (Volcano, {"queues": "research"}, "queues", "use one of queue, queue_weight, namespace"),
        (Volcano, {"queue_weight": 1.5}, "queue_weight", "use a whole number >= 1"),
        (Kueue, {"flavors": [{"node_labels": {}}]}, "flavors[0].name", "set name"),
        (Kueue, {"local_queues": [{"name": "q", "namespace": "n", "cluster_queue": "none"}]},
         "local_queues[0].cluster_queue", "names no defined cluster queue; define the cluster queue first"),
    ],
)
def test_an_addons_mapping_is_checked_naming_the_field(component, inputs, field, fix):
    with pytest.raises(ArgumentError) as info:
        component("addon", inputs)
    assert info.value.field.startswith(field)
    assert fix in info.value.detail
