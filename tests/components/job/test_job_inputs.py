"""DistributedJob with other resources' outputs as arguments, under Pulumi's mocks.

The rule, as Pulumi runs a program: an Output's ``apply`` runs once its value is known, at preview for
values known then (a resource's inputs, config) and at update for the rest; a resource waits for the
Outputs its inputs and ``depends_on`` hold, and is not registered when one of them fails
(pulumi/pulumi ``sdk/python/lib/pulumi/output.py`` ``Output.apply``, ``runtime/_depends_on.py``,
``runtime/rpc.py`` ``serialize_properties``, SDK 3.272.0).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import pulumi
import pulumi_kubernetes as k8s
import pytest
from pulumi.output import Unknown
from pulumi.runtime.rpc import UNKNOWN

from components import DistributedJob, DistributedJobArgs
from components.capabilities import ClusterCapabilities, KueueCapabilities, KueueClusterQueue, KueueFlavor
from components.errors import InvalidJobArgs
from components.job.bundle import build_bundle
from components.job.render import render_job
from runtime.agent import contract
from tests.components.componenttest import PASSWORD, Mocks, RecordingMonitor, deploy, is_secret, job_args, unsecret
from tests.components.schemacheck import validate_manifest

pytestmark = pytest.mark.unit

COMPONENT = "trainplane:index:DistributedJob"
IMAGE = "registry.example/trainer:1"
DB_URL = "postgres://db.research:5432/runs"
NAMESPACE = "research"
SOURCES = {"research", "images", "database", "trainer", "nodes"}
"""The resources the jobs take their arguments from."""


def sources() -> dict[str, pulumi.Output[Any]]:
    """Resources a platform program would have made: a namespace, an image reference, a database endpoint,
    a service account and a node group's labels, each read back as an Output."""
    namespace = k8s.core.v1.Namespace("research", metadata={"name": NAMESPACE})
    images = k8s.core.v1.ConfigMap("images", data={"trainer": IMAGE})
    database = k8s.core.v1.ConfigMap("database", data={"url": DB_URL})
    account = k8s.core.v1.ServiceAccount("trainer", metadata={"name": "trainer"})
    nodes = k8s.core.v1.ConfigMap("nodes", data={"pool": "gpu-a100", "taint": "dedicated"})
    return {
        "namespace": namespace.metadata.name,
        "image": images.data["trainer"],
        "db": database.data["url"],
        "account": account.metadata.name,
        "pool": nodes.data["pool"],
        "taint": nodes.data["taint"],
    }


def arguments(o: dict[str, Any]) -> dict[str, Any]:
    """Every argument that takes an Input, from ``o`` (Outputs, or the plain values they resolve to)."""
    return {
        "namespace": o["namespace"],
        "image": o["image"],
        "args": ["--db", o["db"]],
        "env": {"DB_URL": o["db"], "NCCL_DEBUG": "INFO"},
        "labels": {"team": o["namespace"]},
        "node_selector": {"pool": o["pool"]},
        "tolerations": [{"key": o["taint"], "operator": "Exists", "effect": "NoSchedule"}],
        "service_account": o["account"],
        "pythonpath": [pulumi.Output.concat("/app/", o["namespace"]) if isinstance(o["namespace"], pulumi.Output)
                       else f"/app/{o['namespace']}"],
        "allow_from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": o["namespace"]}}}],
    }


PLAIN = {"namespace": NAMESPACE, "image": IMAGE, "db": DB_URL, "account": "trainer", "pool": "gpu-a100",
         "taint": "dedicated"}
SHAPES = {
    "indexed-job": {},
    "pytorchjob": {"backend": "pytorchjob"},
    "statefulset": {"mode": "service", "script": None},
    "volcano": {"gang_scheduler": "volcano"},
    "kueue": {"gang_scheduler": "kueue"},
}


def queue_arguments(shape: str, o: dict[str, Any]) -> dict[str, Any]:
    """The queue arguments of ``shape``, which also take Inputs (a queue another resource created)."""
    if shape == "volcano":
        return {"queue": o["namespace"]}
    if shape == "kueue":
        return {"cluster_queue": o["pool"]}
    return {}


def job_of(shape: str, o: dict[str, Any]) -> DistributedJobArgs:
    given = arguments(o)
    if SHAPES[shape].get("mode") == "service":
        del given["args"]  # a service job runs no entrypoint
    return job_args(**SHAPES[shape], **given, **queue_arguments(shape, o))


@pytest.mark.parametrize("shape", SHAPES)
def test_a_job_built_from_other_resources_outputs_renders_what_plain_values_render(shape: str) -> None:
    def program() -> dict[str, Any]:
        job = DistributedJob("demo", job_of(shape, sources()))
        return {"namespace": job.namespace, "service_fqdn": job.service_fqdn, "url": job.coordinator_url,
                "job_name": job.job_name}

    result = deploy(program)
    plain = render_job("demo", job_of(shape, PLAIN), PASSWORD, build_bundle())
    children = result.children(result.one(COMPONENT))
    assert set(children) == {f"demo-{m.role}" for m in plain.manifests} | {"demo-token-value"}
    for manifest in plain.manifests:
        child = children[f"demo-{manifest.role}"]
        assert unsecret(child.inputs) == manifest.body, f"{manifest.role} differs from the plain render"
        validate_manifest(unsecret(child.inputs))
    host = "demo-master-0" if shape == "pytorchjob" else "demo-0.demo"
    assert result.outputs == {
        "namespace": NAMESPACE, "job_name": "demo", "service_fqdn": "demo.research.svc.cluster.local",
        "url": f"http://{host}.research.svc.cluster.local:{contract.AGENT_PORT}",
    }


def test_every_child_waits_for_the_resources_its_arguments_come_from() -> None:
    result = deploy(lambda: {"url": DistributedJob("demo", job_of("indexed-job", sources())).coordinator_url})
    source_urns = {r.urn for r in result.registrations.values() if r.name in SOURCES}
    for child in result.children(result.one(COMPONENT)).values():
        assert source_urns <= set(child.dependencies), f"{child.name} does not wait for the checks"


def test_a_namespace_output_names_the_component_after_the_job_alone() -> None:
    """Pulumi names a resource when it is created, before an Output resolves; a plain namespace keeps
    the ``<namespace>/<name>`` URN (issue 12)."""

    def program() -> dict[str, Any]:
        from_output = DistributedJob("demo", job_args(namespace=sources()["namespace"]))
        plain = DistributedJob("other", job_args(namespace="research"))
        return {"a": from_output.job_name, "b": plain.job_name}

    result = deploy(program)
    assert sorted(c.name for c in result.of_type(COMPONENT)) == ["demo", "research/other"]


def test_the_component_aliases_its_former_type_so_existing_stacks_keep_their_jobs() -> None:
    """Pulumi matches a resource registered with an alias to the state of the aliased URN instead of
    replacing it; children inherit their parent's aliases (pulumi/pulumi ``sdk/python/lib/pulumi/resource.py``,
    ``ResourceOptions.aliases``)."""
    result = deploy(lambda: {"name": DistributedJob("demo", job_args()).job_name})
    assert result.one(COMPONENT).alias_types == ["trainplane:job:DistributedJob"]


def messages(error: BaseException) -> list[str]:
    """The messages of ``error``'s ``raise ... from`` chain (Pulumi's serializer wraps a ValueError raised
    in an input, naming the input; the chain may loop back on itself)."""
    seen: list[BaseException] = []
    current: Optional[BaseException] = error
    while current is not None and all(current is not e for e in seen):
        seen.append(current)
        current = current.__cause__
    return [str(e) for e in seen]


INVALID_OUTPUTS = [
    # (argument's overrides given the Output maker, the same overrides as plain values)
    pytest.param(lambda out: {"namespace": out("Team-A")}, {"namespace": "Team-A"}, id="namespace"),
    pytest.param(lambda out: {"image": out("py thon")}, {"image": "py thon"}, id="image"),
    pytest.param(lambda out: {"args": ["--epochs", out(3)]}, {"args": ["--epochs", 3]}, id="args-item"),
    pytest.param(lambda out: {"env": out({"RANK": "3"})}, {"env": {"RANK": "3"}}, id="env"),
    pytest.param(lambda out: {"env": {"NCCL_DEBUG": out(1)}}, {"env": {"NCCL_DEBUG": 1}}, id="env-value"),
    pytest.param(lambda out: {"labels": {"team": out("ml research")}}, {"labels": {"team": "ml research"}},
                 id="labels-value"),
    pytest.param(lambda out: {"node_selector": out({"gpu": "a b"})}, {"node_selector": {"gpu": "a b"}},
                 id="node-selector"),
    pytest.param(lambda out: {"tolerations": [out({"key": "a", "effects": "NoSchedule"})]},
                 {"tolerations": [{"key": "a", "effects": "NoSchedule"}]}, id="toleration"),
    pytest.param(lambda out: {"service_account": out("Trainer")}, {"service_account": "Trainer"},
                 id="service-account"),
    pytest.param(lambda out: {"pythonpath": out(["/app", "examples"])}, {"pythonpath": ["/app", "examples"]},
                 id="pythonpath"),
    pytest.param(lambda out: {"gang_scheduler": "volcano", "queue": out("Team_A")},
                 {"gang_scheduler": "volcano", "queue": "Team_A"}, id="queue"),
    pytest.param(lambda out: {"gang_scheduler": "kueue", "cluster_queue": out("GPU")},
                 {"gang_scheduler": "kueue", "cluster_queue": "GPU"}, id="cluster-queue"),
    pytest.param(lambda out: {"scheduler_name": out("My Scheduler")}, {"scheduler_name": "My Scheduler"},
                 id="scheduler-name"),
    pytest.param(lambda out: {"allow_from": out([{}])}, {"allow_from": [{}]}, id="allow-from"),
]


def fails_like_plain(
    with_outputs: Callable[[Callable[[Any], pulumi.Output[Any]]], dict[str, Any]],
    plain: dict[str, Any],
    cluster: Optional[ClusterCapabilities] = None,
    preview: bool = False,
) -> None:
    """An Output carrying an invalid value fails the run with the message the plain value raises at once
    (``InvalidJobArgs``, Pulumi adding which input held it), and no object of the job is registered."""
    if cluster is None:
        with pytest.raises(InvalidJobArgs) as plain_error:
            job_args(**plain)
    else:
        with pytest.raises(InvalidJobArgs) as plain_error:
            deploy(lambda: {"name": DistributedJob("demo", job_args(**plain), cluster=cluster).job_name})
    monitor = RecordingMonitor()

    def program() -> dict[str, Any]:
        holder = k8s.core.v1.ConfigMap("values", data={"x": "y"})

        def out(value: Any) -> pulumi.Output[Any]:
            return holder.id.apply(lambda _: value)

        return {"name": DistributedJob("demo", job_args(**with_outputs(out)), cluster=cluster).job_name}

    with pytest.raises(Exception) as run_error:
        deploy(program, monitor=monitor, preview=preview)
    assert any(message.endswith(str(plain_error.value)) for message in messages(run_error.value))
    registered = [r for r in monitor.registrations.values() if r.name != "values"]
    assert [r.type for r in registered if r.type != COMPONENT] == [], "a child of the job was registered"
    # the component itself waits for an Output namespace (its alias from the plain name is built from it), so
    # an invalid one leaves it out too
    invalid_namespace = str(plain_error.value).startswith("namespace=")
    assert [r.type for r in registered] == ([] if invalid_namespace else [COMPONENT])


@pytest.mark.parametrize(("with_outputs", "plain"), INVALID_OUTPUTS)
def test_an_output_carrying_an_invalid_value_fails_with_the_plain_values_message(
    with_outputs: Callable[[Callable[[Any], pulumi.Output[Any]]], dict[str, Any]], plain: dict[str, Any]
) -> None:
    fails_like_plain(with_outputs, plain)


def test_a_value_pulumi_knows_at_preview_is_checked_at_preview() -> None:
    fails_like_plain(lambda out: {"namespace": out("Team-A")}, {"namespace": "Team-A"}, preview=True)


def test_a_value_unknown_at_preview_fails_nothing_and_stays_unknown() -> None:
    monitor = RecordingMonitor(Mocks(outputs={"images": {"data": {"trainer": UNKNOWN}}}))

    def program() -> dict[str, Any]:
        images = k8s.core.v1.ConfigMap("images", data={"trainer": IMAGE})
        return {"url": DistributedJob("demo", job_args(image=images.data["trainer"])).coordinator_url}

    result = deploy(program, monitor=monitor, preview=True)
    container = result.named("demo-indexed-job").inputs["spec"]["template"]["spec"]["containers"][0]
    assert isinstance(container["image"], Unknown)
    assert result.named("demo-service").inputs["metadata"]["namespace"] == "default", "known parts stay known"
    assert result.outputs["url"] == f"http://demo-0.demo.default.svc.cluster.local:{contract.AGENT_PORT}"


VOLCANO_CLUSTER = ClusterCapabilities(volcano_queues=("research",))
KUEUE_CLUSTER = ClusterCapabilities(kueue=KueueCapabilities(
    frameworks=frozenset({"batch/job"}),
    cluster_queues={"gpu": KueueClusterQueue("gpu", (KueueFlavor("a100", {"pool": "a100"}, {"cpu": "64"}),))},
    local_queues={("research", "team"): "gpu"},
))


@pytest.mark.parametrize(
    ("with_outputs", "plain", "cluster"),
    [
        pytest.param(lambda out: {"gang_scheduler": "volcano", "queue": out("batch")},
                     {"gang_scheduler": "volcano", "queue": "batch"}, VOLCANO_CLUSTER, id="volcano-queue"),
        pytest.param(lambda out: {"gang_scheduler": "kueue", "queue": "team", "namespace": out("default")},
                     {"gang_scheduler": "kueue", "queue": "team", "namespace": "default"}, KUEUE_CLUSTER,
                     id="kueue-local-queue-in-namespace"),
        pytest.param(lambda out: {"gang_scheduler": "kueue", "queue": "team", "namespace": "research", "cpus": 1,
                                  "node_selector": out({"pool": "h100"})},
                     {"gang_scheduler": "kueue", "queue": "team", "namespace": "research", "cpus": 1,
                      "node_selector": {"pool": "h100"}}, KUEUE_CLUSTER, id="kueue-flavor-node-selector"),
    ],
)
def test_the_cluster_checks_that_read_an_output_run_when_it_is_known(
    with_outputs: Callable[[Callable[[Any], pulumi.Output[Any]]], dict[str, Any]], plain: dict[str, Any],
    cluster: ClusterCapabilities,
) -> None:
    fails_like_plain(with_outputs, plain, cluster=cluster)


def test_the_cluster_checks_that_need_no_output_run_at_once() -> None:
    monitor = RecordingMonitor()
    cluster = ClusterCapabilities(volcano_queues=None)

    def program() -> dict[str, Any]:
        queue = sources()["namespace"]
        return {"name": DistributedJob("demo", job_args(gang_scheduler="volcano", queue=queue), cluster=cluster)
                .job_name}

    with pytest.raises(InvalidJobArgs, match=r"^gang_scheduler='volcano': Volcano is not installed on the cluster"):
        deploy(program, monitor=monitor)
    assert {r.name for r in monitor.registrations.values()} <= SOURCES


def test_a_valid_output_passes_the_cluster_checks() -> None:
    def program() -> dict[str, Any]:
        o = sources()
        job = DistributedJob("demo", job_args(gang_scheduler="kueue", queue="team", namespace=o["namespace"],
                                              cpus=2, node_selector={"pool": "a100"}), cluster=KUEUE_CLUSTER)
        return {"url": job.coordinator_url}

    result = deploy(program)
    assert result.named("demo-indexed-job").inputs["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team"


def test_arguments_that_decide_the_shape_still_refuse_outputs() -> None:
    def program() -> dict[str, Any]:
        workers = sources()["pool"]
        return {"name": DistributedJob("demo", job_args(workers=workers)).job_name}

    with pytest.raises(InvalidJobArgs, match=r"^workers=<pulumi\.output\.Output object at 0x[0-9a-f]+>: is a pulumi "
                       r"Output, .*; pass a plain int; it decides what the job renders, which Pulumi must know when "
                       r"the job is created$"):
        deploy(program)


def test_the_custom_resources_wait_for_what_the_job_depends_on() -> None:
    """A program in another language cannot pass ``crd_dependencies``; it gives the add-ons as ``dependsOn``."""

    def program() -> dict[str, Any]:
        addon = k8s.core.v1.Namespace("volcano-system")
        job = DistributedJob("demo", job_args(gang_scheduler="volcano"),
                             opts=pulumi.ResourceOptions(depends_on=[addon]))
        return {"addon": addon.urn, "name": job.job_name}

    result = deploy(program)
    assert result.outputs["addon"] in result.named("demo-podgroup").dependencies
    assert result.outputs["addon"] not in result.named("demo-service").dependencies


def test_a_mapping_of_arguments_as_a_provider_passes_them_renders_the_same_job() -> None:
    """The component provider hands a program's inputs on as a dict of Python names, every number a float
    (``google.protobuf.Value``; pulumi 3.272.0 ``provider/experimental/component.py``, ``map_input_properties``
    keeps the float)."""
    inputs = {"image": IMAGE, "script": "train.py", "workers": 3.0, "num_proc": 2.0, "gpus": 1.0, "cpus": 4.0,
              "quorum_timeout": 120.0, "agent_port": 32301.0, "env": {"A": "1"}}

    def program() -> dict[str, Any]:
        return {"name": DistributedJob("demo", inputs).job_name}  # type: ignore[arg-type]

    result = deploy(program)
    plain = render_job("demo", DistributedJobArgs(image=IMAGE, script="train.py", workers=3, num_proc=2, gpus=1,
                                                  cpus=4.0, quorum_timeout=120.0, agent_port=32301,
                                                  env={"A": "1"}), PASSWORD, build_bundle())
    for manifest in plain.manifests:
        assert unsecret(result.named(f"demo-{manifest.role}").inputs) == manifest.body


@pytest.mark.parametrize(
    ("inputs", "field", "problem"),
    [
        ({"image": IMAGE, "script": "train.py", "worker": 2}, "worker", "is not a DistributedJobArgs field"),
        ({"script": "train.py"}, "image", "is required"),
        ({"image": IMAGE, "script": "train.py", "workers": 2.5}, "workers", "must be a whole number"),
        (["image"], "args", "must be a DistributedJobArgs or a mapping of its fields"),
    ],
)
def test_a_mapping_of_arguments_is_checked_like_the_args(inputs: Any, field: str, problem: str) -> None:
    with pytest.raises(InvalidJobArgs) as info:
        DistributedJobArgs.from_inputs(inputs)
    assert (info.value.field, info.value.problem) == (field, problem)


def test_a_secret_output_stays_a_secret_where_it_is_rendered_only() -> None:
    """Pulumi keeps a secret Output's secrecy through ``apply`` and serialises it with the secret signature
    (``runtime/rpc.py``; reading inputs back, the SDK marks the enclosing top-level property secret). Given in
    ``secret_values``, it is rendered only into the job's env Secret; the pod template holds a reference, and the
    job's other objects carry none of it (a secret in ``env`` is refused: test_job_platform_component)."""

    def program() -> dict[str, Any]:
        job = DistributedJob("demo", job_args(secret_values={"DB_PASSWORD": pulumi.Output.secret("hunter2")}))
        return {"name": job.job_name}

    result = deploy(program)
    assert is_secret(result.named("demo-env").inputs["stringData"])
    assert unsecret(result.named("demo-env").inputs["stringData"]) == {"DB_PASSWORD": "hunter2"}
    workload = result.named("demo-indexed-job").inputs
    assert not is_secret(workload["spec"]) and not is_secret(workload["metadata"])
    env = workload["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "demo-env", "key": "DB_PASSWORD"}}} in env
    for role in ("service", "runtime", "network-policy"):
        assert not any(is_secret(v) for v in result.named(f"demo-{role}").inputs.values()), role
