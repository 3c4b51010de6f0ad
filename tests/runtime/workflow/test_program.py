"""KubernetesCompute's inline Pulumi program under Pulumi's mocks: it renders exactly what
``DistributedJob`` renders for the same arguments, under a provider for the chosen kubeconfig and
context, and exports what the driver reads back."""

from __future__ import annotations

import pytest

from components.job import DistributedJobArgs
from components.job.bundle import build_bundle
from components.job.naming import resource_name
from components.job.render import render_job
from runtime.agent import contract
from runtime.workflow import program
from tests.components.componenttest import PASSWORD, unsecret
from tests.components.schemacheck import validate_manifest
from tests.runtime.kubecluster import run_inline

pytestmark = pytest.mark.unit

COMPONENT = "trainplane:index:DistributedJob"
PROVIDER = "pulumi:providers:kubernetes"


def service_args(**overrides) -> DistributedJobArgs:
    base = {"image": "registry.example/trainer:1", "workers": 3, "num_proc": 2, "cpus": 2.0, "gpus": 1,
            "memory": "8Gi", "namespace": "research", "distribution": "pytorch", "mode": "service",
            "pythonpath": ("/app",)}
    return DistributedJobArgs(**{**base, **overrides})


@pytest.mark.parametrize("extra", [{}, {"gang_scheduler": "volcano", "queue": "research"}], ids=["plain", "volcano"])
def test_the_program_renders_what_distributed_job_renders_under_its_own_provider(extra):
    args = service_args(**extra)
    cluster = program.ClusterAccess(kubeconfig="/home/me/.kube/lab", context="lab")

    deployment = run_inline(program.job_program("trainer", args, cluster))

    provider = deployment.one(PROVIDER)
    assert (provider.name, provider.inputs.get("kubeconfig"), provider.inputs.get("context")) == \
        ("trainer-cluster", "/home/me/.kube/lab", "lab")
    component = deployment.one(COMPONENT)
    children = deployment.children(component)
    rendered = render_job("trainer", args, PASSWORD, build_bundle())
    prefix = resource_name("trainer", args.namespace)
    assert set(children) - {f"{prefix}-token-value"} == {f"{prefix}-{m.role}" for m in rendered.manifests}
    for manifest in rendered.manifests:
        child = children[f"{prefix}-{manifest.role}"]
        assert unsecret(child.inputs) == manifest.body, f"{manifest.role} differs from what DistributedJob renders"
        assert child.provider.startswith(provider.urn), f"{manifest.role} is not created through the job's provider"
        if not manifest.custom:
            validate_manifest(unsecret(child.inputs))
    statefulset = children[f"{prefix}-statefulset"].inputs
    assert statefulset["spec"]["replicas"] == 3


def test_the_program_exports_the_token_as_a_secret_and_where_node_0_listens():
    args = service_args()
    cluster = program.ClusterAccess()

    deployment = run_inline(program.job_program("trainer", args, cluster))

    assert deployment.outputs == {
        program.TOKEN: PASSWORD, program.NAMESPACE: "research", program.COORDINATOR_POD: "trainer-0",
        program.AGENT_PORT: contract.AGENT_PORT,
        program.COORDINATOR_URL: f"http://trainer-0.trainer.research.svc.cluster.local:{contract.AGENT_PORT}",
        program.SPEC: program.spec_digest("trainer", args, cluster),
    }
    assert deployment.secret_outputs == {program.TOKEN}
    provider = deployment.one(PROVIDER)
    assert "kubeconfig" not in provider.inputs and "context" not in provider.inputs, \
        "no kubeconfig given: the provider reads $KUBECONFIG or ~/.kube/config itself"


def test_the_spec_digest_changes_with_anything_the_program_renders_from():
    cluster = program.ClusterAccess("/k", "c")
    digest = program.spec_digest("trainer", service_args(), cluster)

    assert program.spec_digest("trainer", service_args(), program.ClusterAccess("/k", "c")) == digest
    changed = [program.spec_digest("trainer", service_args(workers=4), cluster),
               program.spec_digest("trainer", service_args(image="registry.example/trainer:2"), cluster),
               program.spec_digest("trainer", service_args(env={"A": "1"}), cluster),
               program.spec_digest("trainer-2", service_args(), cluster),
               program.spec_digest("trainer", service_args(), program.ClusterAccess("/k", "other"))]
    assert len({digest, *changed}) == 6


def test_the_program_deploys_service_jobs_only():
    with pytest.raises(ValueError, match="mode='batch': a KubernetesCompute deploys a service-mode job"):
        program.job_program("trainer", DistributedJobArgs(image="i", script="train.py"), program.ClusterAccess())
