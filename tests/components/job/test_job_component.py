"""DistributedJob under Pulumi mocks: children, parents, options, inputs and outputs."""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest

from components import DistributedJob
from components.errors import InvalidJobArgs
from components.job.bundle import build_bundle
from components.job.render import render_job
from runtime.agent import contract
from tests.components.componenttest import (
    PASSWORD,
    PROJECT,
    STACK,
    Deployment,
    DuplicateUrn,
    RecordingMonitor,
    deploy,
    is_secret,
    job_args,
    unsecret,
)

pytestmark = pytest.mark.unit

BACKENDS = {
    "indexed-job": {},
    "pytorchjob": {"backend": "pytorchjob"},
    "statefulset": {"mode": "service"},
}
GANGS = {
    "none": {},
    "volcano": {"gang_scheduler": "volcano", "queue": "research"},
    "scheduler-plugins": {"gang_scheduler": "scheduler-plugins"},
    "kueue": {"gang_scheduler": "kueue", "cluster_queue": "gpu-pool"},
}
WORKLOAD_TYPES = {
    "indexed-job": "kubernetes:batch/v1:Job",
    "pytorchjob": "kubernetes:kubeflow.org/v1:PyTorchJob",
    "statefulset": "kubernetes:apps/v1:StatefulSet",
}
GANG_TYPES = {
    "none": set(),
    "volcano": {"kubernetes:scheduling.volcano.sh/v1beta1:PodGroup"},
    "scheduler-plugins": {"kubernetes:scheduling.x-k8s.io/v1alpha1:PodGroup"},
    "kueue": {"kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue"},
}
COMMON_TYPES = {
    "random:index/randomPassword:RandomPassword",
    "kubernetes:core/v1:Secret",
    "kubernetes:core/v1:ConfigMap",
    "kubernetes:core/v1:Service",
    "kubernetes:networking.k8s.io/v1:NetworkPolicy",
}
COMPONENT_TYPE = "trainplane:index:DistributedJob"
OUTPUTS = ("job_name", "namespace", "service_fqdn", "coordinator_url", "token")


def run_job(name: str = "demo", with_provider: bool = False, **overrides: Any) -> Deployment:
    def program() -> dict[str, pulumi.Output[Any]]:
        addon = k8s.core.v1.Namespace("training-operator")
        provider = k8s.Provider("cluster") if with_provider else None
        job = DistributedJob(
            name,
            job_args(**overrides),
            opts=pulumi.ResourceOptions(provider=provider),
            crd_dependencies=[addon],
        )
        extra = {"provider": pulumi.Output.concat(provider.urn, "::", provider.id)} if provider else {}
        return {key: getattr(job, key) for key in OUTPUTS} | {"addon": addon.urn} | extra

    return deploy(program)


def expected_types(backend: str, gang: str) -> set[str]:
    types = COMMON_TYPES | {WORKLOAD_TYPES[backend]}
    if backend == "statefulset":
        types.add("kubernetes:policy/v1:PodDisruptionBudget")
    if backend != "pytorchjob" or gang == "kueue":
        types |= GANG_TYPES[gang]
    return types


@pytest.mark.parametrize("gang", GANGS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_children_parents_and_inputs(backend: str, gang: str) -> None:
    overrides = {**BACKENDS[backend], **GANGS[gang]}
    result = run_job(**overrides)
    component = result.one(COMPONENT_TYPE)
    children = result.children(component)
    assert set(children) == {r.name for r in result.registrations.values()} - {"demo", "training-operator"}
    assert component.parent.endswith(f"pulumi:pulumi:Stack::{PROJECT}-{STACK}")
    assert {r.type for r in children.values()} == expected_types(backend, gang)
    assert all(name.startswith("demo-") for name in children)

    rendered = render_job("demo", job_args(**overrides), PASSWORD, build_bundle())
    earlier: list[str] = []
    for manifest in rendered.manifests:
        child = children[f"demo-{manifest.role}"]
        assert unsecret(child.inputs) == manifest.body, f"{manifest.role} inputs differ from the builder's"
        assert (result.outputs["addon"] in child.dependencies) is manifest.custom, "only CRs wait for their CRD"
        assert child.delete_before_replace is bool(manifest.replace_on)
        assert child.replace_on_changes == list(manifest.replace_on)
        if manifest.role == backend:
            assert set(earlier) <= set(child.dependencies), "the workload waits for everything before it"
        else:
            assert not set(earlier) & set(child.dependencies)
        earlier.append(child.urn)


@pytest.mark.parametrize("backend", BACKENDS)
def test_workload_key_fields_reach_the_engine(backend: str) -> None:
    result = run_job(workers=3, gang_scheduler="volcano", **BACKENDS[backend])
    workload = next(r for r in result.registrations.values() if r.type == WORKLOAD_TYPES[backend]).inputs
    assert workload["metadata"]["annotations"] == {"pulumi.com/waitFor": "jsonpath={.metadata.uid}"}
    if backend == "pytorchjob":
        replicas = workload["spec"]["pytorchReplicaSpecs"]
        assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 2)
        assert workload["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == 3
        container = replicas["Master"]["template"]["spec"]["containers"][0]
    else:
        group = result.named("demo-podgroup").inputs
        assert group["spec"]["minMember"] == 3
        pod = workload["spec"]["template"]
        assert pod["spec"]["schedulerName"] == "volcano"
        container = pod["spec"]["containers"][0]
    assert container["command"] == ["python3", "-m", contract.AGENT_MODULE]


def test_token_secret_and_outputs() -> None:
    result = run_job(namespace="research")
    secret = result.named("research/demo-token").inputs
    assert is_secret(secret["stringData"]), "the token must stay a Pulumi secret"
    assert unsecret(secret["stringData"]) == {"token": PASSWORD}
    password = result.named("research/demo-token-value").inputs
    assert (password["length"], password["special"]) == (48, False)
    assert {k: result.outputs[k] for k in OUTPUTS} == {
        "job_name": "demo",
        "namespace": "research",
        "service_fqdn": "demo.research.svc.cluster.local",
        "coordinator_url": f"http://demo-0.demo.research.svc.cluster.local:{contract.AGENT_PORT}",
        "token": PASSWORD,
    }
    assert result.secret_outputs == {"token"}


def test_provider_from_opts_reaches_every_kubernetes_child() -> None:
    result = run_job(with_provider=True, backend="pytorchjob", gang_scheduler="kueue", queue="team-a")
    component = result.one(COMPONENT_TYPE)
    for child in result.children(component).values():
        if child.type.startswith("kubernetes:"):
            assert child.provider == result.outputs["provider"]
        else:
            assert "providers:kubernetes" not in child.provider
    assert result.outputs["provider"].endswith("pulumi:providers:kubernetes::cluster::cluster-id")


def test_bad_name_fails_before_anything_is_registered() -> None:
    monitor = RecordingMonitor()
    with pytest.raises(InvalidJobArgs, match=r"name='Demo_Job': not a valid name"):
        deploy(lambda: {"name": DistributedJob("Demo_Job", job_args()).job_name}, monitor=monitor)
    assert monitor.registrations == {}


@pytest.mark.parametrize("backend", ["indexed-job", "pytorchjob"])
def test_a_command_reaches_every_pod_to_run_without_python(backend: str) -> None:
    result = run_job(script=None, command=["bash", "-c", "echo $RANK"], args=["--fast"], **BACKENDS[backend])
    workload = next(r for r in result.registrations.values() if r.type == WORKLOAD_TYPES[backend]).inputs
    spec = workload["spec"]
    pods = [r["template"] for r in spec["pytorchReplicaSpecs"].values()] if backend == "pytorchjob" else [
        spec["template"]]
    for pod in pods:
        (container,) = pod["spec"]["containers"]
        assert container["command"] == ["python3", "-m", contract.AGENT_MODULE], "the agent still runs the pod"
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert json.loads(env[contract.ENTRYPOINT]) == ["bash", "-c", "echo $RANK", "--fast"]
        assert env[contract.NO_PYTHON] == "true"


def test_the_token_has_no_keepers_so_no_job_change_replaces_it() -> None:
    changes: list[dict[str, Any]] = [
        {},
        {"workers": 4},
        {"image": "python:3.12-slim", "args": ["--epochs", "9"]},
        {"backend": "pytorchjob", "gang_scheduler": "kueue", "queue": "team-a"},
        {"mode": "service"},
    ]
    passwords = [run_job(**change).named("demo-token-value") for change in changes]
    first = passwords[0]
    assert "keepers" not in first.inputs
    assert (first.inputs["length"], first.inputs["special"]) == (48, False)
    for password in passwords[1:]:
        assert password.urn == first.urn
        assert password.inputs == first.inputs, "an input that follows the job would replace the token"
        assert not password.replace_on_changes and not password.delete_before_replace


def test_a_ray_service_job_reaches_the_engine_with_its_framework_ports() -> None:
    result = run_job(mode="service", script=None, distribution="ray", num_proc=1, cpus=4)
    service = result.named("demo-service").inputs
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {
        contract.AGENT_PORT_NAME: contract.AGENT_PORT, contract.MASTER_PORT_NAME: contract.DEFAULT_MASTER_PORT,
        contract.RAY_HEAD_PORT_NAME: contract.DEFAULT_MASTER_PORT + contract.CONTROLLER_PORT_OFFSET,
        contract.RAY_CLIENT_PORT_NAME: contract.DEFAULT_MASTER_PORT + contract.RAY_CLIENT_PORT_OFFSET,
    }
    container = result.named("demo-statefulset").inputs["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (env[contract.DISTRIBUTION], env[contract.MODE], env[contract.DAEMON_ARGS]) == (
        "ray", "service", '["--num-cpus=4"]')


def test_jobs_of_one_name_in_two_namespaces_have_distinct_urns() -> None:
    """Pulumi identifies a resource by its URN (stack, project, parent types, type and name) and refuses
    a second registration of one URN ("Duplicate resource URN"); children named from the job name alone
    would collide across namespaces."""

    def program() -> dict[str, pulumi.Output[Any]]:
        jobs = [DistributedJob("demo", job_args(namespace=ns)) for ns in ("default", "research")]
        return {f"url-{i}": job.coordinator_url for i, job in enumerate(jobs)}

    result = deploy(program)
    components = result.of_type(COMPONENT_TYPE)
    assert sorted(c.name for c in components) == ["demo", "research/demo"]
    secrets = result.of_type("kubernetes:core/v1:Secret")
    assert sorted((s.name, s.inputs["metadata"]["namespace"]) for s in secrets) == [
        ("demo-token", "default"), ("research/demo-token", "research")]
    assert {r.inputs["metadata"]["name"] for r in secrets} == {"demo-token"}, "Kubernetes names are unchanged"
    assert result.outputs["url-1"] == f"http://demo-0.demo.research.svc.cluster.local:{contract.AGENT_PORT}"


def test_the_recorder_fails_on_a_duplicate_urn_instead_of_keeping_one() -> None:
    def program() -> dict[str, pulumi.Output[Any]]:
        first = k8s.core.v1.Namespace("same")
        second = k8s.core.v1.Namespace("same")
        return {"first": first.urn, "second": second.urn}

    with pytest.raises(DuplicateUrn, match=r"kubernetes:core/v1:Namespace::same$"):
        deploy(program)


def test_a_job_the_cluster_cannot_run_fails_before_anything_is_registered() -> None:
    """The job component checks its arguments against the cluster it targets (``components.job.fit``)."""
    from components.capabilities import ClusterCapabilities  # new with the check: the other tests run without it

    monitor = RecordingMonitor()
    cluster = ClusterCapabilities(volcano_queues=None)
    with pytest.raises(InvalidJobArgs, match=r"^gang_scheduler='volcano': Volcano is not installed on the cluster"):
        deploy(lambda: {"name": DistributedJob("demo", job_args(gang_scheduler="volcano"), cluster=cluster).job_name},
               monitor=monitor)
    assert monitor.registrations == {}
