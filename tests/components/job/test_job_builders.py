"""The pure builders: every rendered object against its schema, and the fields that matter."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema
import pytest

from components.cluster import GpuNodeGroupArgs
from components.cluster.eks import gpu_node_group_settings
from components.errors import OperatorRuleError
from components.job.bundle import build_bundle
from components.job.render import Manifest, RenderedJob, render_job
from components.job.workloads import check_pytorchjob
from runtime.agent import contract
from tests.components.componenttest import TOKEN, job_args, tolerates, validate_manifest

BUNDLE = build_bundle()
BACKENDS = {
    "indexed-job": ({}, ("batch/v1", "Job")),
    "pytorchjob": ({"backend": "pytorchjob"}, ("kubeflow.org/v1", "PyTorchJob")),
    "pytorchjob-elastic": (
        {"backend": "pytorchjob", "min_workers": 1, "max_workers": 4},
        ("kubeflow.org/v1", "PyTorchJob"),
    ),
    "statefulset": ({"mode": "service"}, ("apps/v1", "StatefulSet")),
}
VOLCANO_PG = ("scheduling.volcano.sh/v1beta1", "PodGroup")
COSCHED_PG = ("scheduling.x-k8s.io/v1alpha1", "PodGroup")
LOCAL_QUEUE = ("kueue.x-k8s.io/v1beta2", "LocalQueue")
GANGS = {
    "none": {},
    "volcano": {"gang_scheduler": "volcano", "queue": "research"},
    "scheduler-plugins": {"gang_scheduler": "scheduler-plugins"},
    "kueue-queue": {"gang_scheduler": "kueue", "queue": "team-a"},
    "kueue-cluster-queue": {"gang_scheduler": "kueue", "cluster_queue": "gpu-pool"},
}
COMMON_KINDS = {
    ("v1", "Secret"),
    ("v1", "ConfigMap"),
    ("v1", "Service"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
}
FULL = {
    "workers": 3,
    "quorum_workers": 3,
    "gpus": 2,
    "num_proc": "auto",
    "cpus": 7.5,
    "memory": "60Gi",
    "shm_size": "8Gi",
    "tolerations": [{"key": "team", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
    "node_selector": {"nvidia.com/gpu.present": "true"},
    "env": {"NCCL_DEBUG": "INFO"},
    "labels": {"team": "ml"},
    "service_account": "trainer",
    "working_dir": "/workspace",
    "image_pull_policy": "IfNotPresent",
    "log_dir": "/var/log/trainplane",
    "namespace": "research",
    "allow_from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "clients"}}}],
    "args": ["--epochs", "3"],
}


def render(name: str = "demo", **overrides: Any) -> RenderedJob:
    return render_job(name, job_args(**overrides), TOKEN, BUNDLE)


def within_kueue(overrides: dict[str, Any]) -> dict[str, Any]:
    """Elastic bounds Kueue can honour: it keeps a job at the pod count it admitted, so no growth."""
    if overrides.get("gang_scheduler") == "kueue" and "max_workers" in overrides:
        return {**overrides, "max_workers": overrides.get("workers", 2)}
    return overrides


def expected_kinds(backend: str, gang: str) -> set[tuple[str, str]]:
    kinds = COMMON_KINDS | {BACKENDS[backend][1]}
    if backend == "statefulset":
        kinds.add(("policy/v1", "PodDisruptionBudget"))
    operator_gang = backend.startswith("pytorchjob")
    if gang == "volcano" and not operator_gang:
        kinds.add(VOLCANO_PG)
    if gang == "scheduler-plugins" and not operator_gang:
        kinds.add(COSCHED_PG)
    if gang == "kueue-cluster-queue":
        kinds.add(LOCAL_QUEUE)
    return kinds


def workload_manifest_of(job: RenderedJob) -> Manifest:
    return next(m for m in job.manifests if m.role in ("indexed-job", "statefulset", "pytorchjob"))


def workload(job: RenderedJob) -> dict[str, Any]:
    return workload_manifest_of(job).body


def templates(job: RenderedJob) -> list[dict[str, Any]]:
    spec = workload(job)["spec"]
    if "pytorchReplicaSpecs" in spec:
        return [r["template"] for r in spec["pytorchReplicaSpecs"].values()]
    return [spec["template"]]


def env_of(template: dict[str, Any]) -> dict[str, Any]:
    env = template["spec"]["containers"][0]["env"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in env}


def kind_of(job: RenderedJob, kind: str) -> dict[str, Any]:
    return next(m.body for m in job.manifests if m.body["kind"] == kind)


@pytest.mark.parametrize("gang", GANGS)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("extra", [{}, FULL], ids=["small", "full"])
def test_every_object_matches_its_schema(backend: str, gang: str, extra: dict[str, Any]) -> None:
    overrides = within_kueue({**BACKENDS[backend][0], **GANGS[gang], **extra})
    if overrides.get("mode") == "service":
        overrides.pop("args", None)  # a service job runs no entrypoint to take them
    job = render(**overrides)
    assert {(m.body["apiVersion"], m.body["kind"]) for m in job.manifests} == expected_kinds(backend, gang)
    for manifest in job.manifests:
        validate_manifest(manifest.body)
        assert manifest.body["metadata"]["namespace"] == job.names.namespace
        assert manifest.body["metadata"]["labels"][contract.LABEL_JOB] == "demo"


def test_schema_validation_catches_a_typo() -> None:
    body = copy.deepcopy(workload(render(backend="pytorchjob")))
    body["spec"]["runPolicy"]["cleanpodpolicy"] = "Running"
    with pytest.raises(jsonschema.ValidationError, match="cleanpodpolicy"):
        validate_manifest(body)
    job = copy.deepcopy(workload(render()))
    job["spec"]["template"]["spec"]["containers"][0]["commands"] = ["x"]
    with pytest.raises(jsonschema.ValidationError):
        validate_manifest(job)


def test_indexed_job_shape() -> None:
    job = render(workers=4, active_deadline_seconds=3600, ttl_seconds_after_finished=600)
    body = workload(job)
    spec = body["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 4, 4)
    assert (spec["backoffLimit"], spec["activeDeadlineSeconds"], spec["ttlSecondsAfterFinished"]) == (
        0,
        3600,
        600,
    )
    assert spec["podFailurePolicy"]["rules"][0]["action"] == "Ignore"
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == job.names.service == "demo"
    assert pod["restartPolicy"] == "Never"
    assert body["metadata"]["annotations"] == {"pulumi.com/waitFor": "jsonpath={.metadata.uid}"}


def test_pod_runs_the_agent_with_the_env_contract() -> None:
    job = render(args=["--epochs", "3"], max_restarts=2, quorum_timeout=90.5, monitor_members=False)
    template = templates(job)[0]
    container = template["spec"]["containers"][0]
    assert container["command"] == ["python3", "-m", "runtime.agent"]
    env = env_of(template)
    assert env[contract.POD_IP] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert env[contract.POD_NAME] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env[contract.POD_NAMESPACE] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env[contract.TOKEN] == {"secretKeyRef": {"name": "demo-token", "key": "token"}}
    assert env["PYTHONPATH"] == contract.BUNDLE_MOUNT_PATH
    assert json.loads(env[contract.ENTRYPOINT]) == ["train.py", "--epochs", "3"]
    assert {
        k: env[k]
        for k in (
            contract.JOB_NAME,
            contract.WORKERS,
            contract.NUM_PROC,
            contract.COORDINATOR_HOST,
            contract.AGENT_PORT_SETTING,
            contract.MASTER_PORT,
            contract.QUORUM_TIMEOUT,
            contract.MAX_RESTARTS,
            contract.DISTRIBUTION,
            contract.MODE,
            contract.MONITOR_MEMBERS,
        )
    } == {
        contract.JOB_NAME: "demo",
        contract.WORKERS: "2",
        contract.NUM_PROC: "2",
        contract.COORDINATOR_HOST: "demo-0.demo",
        contract.AGENT_PORT_SETTING: str(contract.AGENT_PORT),
        contract.MASTER_PORT: str(contract.DEFAULT_MASTER_PORT),
        contract.QUORUM_TIMEOUT: "90.5",
        contract.MAX_RESTARTS: "2",
        contract.DISTRIBUTION: "spmd",
        contract.MODE: "batch",
        contract.MONITOR_MEMBERS: "false",
    }
    # One writer for pods and local agents (runtime/agent/spec/environment.py): every setting with a
    # value, unset ones left to the agent's default (a quorum of every node).
    assert contract.MIN_WORKERS not in env and contract.LOG_DIR not in env and contract.QUORUM_WORKERS not in env
    assert env[contract.NO_PYTHON] == "false", "a script runs under the interpreter"
    assert env_of(templates(render(min_workers=1, max_workers=2, quorum_workers=1))[0])[contract.QUORUM_WORKERS] == "1"
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    assert volumes[mounts[contract.BUNDLE_MOUNT_PATH]]["configMap"]["name"] == "demo-runtime"
    assert volumes[mounts[contract.BUNDLE_MOUNT_PATH]]["configMap"]["items"] == [
        dict(i) for i in BUNDLE.items
    ]
    assert volumes[mounts["/dev/shm"]]["emptyDir"] == {"medium": "Memory"}
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        contract.AGENT_PORT_NAME: contract.AGENT_PORT,
        contract.MASTER_PORT_NAME: contract.DEFAULT_MASTER_PORT,
    }
    labels = template["metadata"]["labels"]
    assert labels["sidecar.istio.io/inject"] == "false"
    assert labels[contract.LABEL_NAME] == contract.APP_NAME and labels[contract.LABEL_INSTANCE] == "demo"
    assert template["metadata"]["annotations"]["trainplane.dev/bundle-sha256"] == BUNDLE.digest
    assert template["spec"]["automountServiceAccountToken"] is False
    assert "resources" not in container and "tolerations" not in template["spec"]


def test_gpu_pod_resources_and_toleration() -> None:
    job = render(**FULL)
    template = templates(job)[0]
    container = template["spec"]["containers"][0]
    assert container["resources"] == {
        "requests": {"cpu": "7500m", "memory": "60Gi"},
        "limits": {"memory": "60Gi", "nvidia.com/gpu": "2"},
    }
    assert template["spec"]["tolerations"][-1] == {
        "key": "nvidia.com/gpu",
        "operator": "Exists",
        "effect": "NoSchedule",
    }
    assert template["spec"]["tolerations"][0]["key"] == "team"
    assert template["spec"]["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert template["spec"]["serviceAccountName"] == "trainer"
    assert template["spec"]["automountServiceAccountToken"] is True
    assert (container["workingDir"], container["imagePullPolicy"]) == ("/workspace", "IfNotPresent")
    env = env_of(template)
    assert (env[contract.NUM_PROC], env[contract.QUORUM_WORKERS], env[contract.LOG_DIR]) == (
        "2",
        "3",
        "/var/log/trainplane",
    )
    assert env["NCCL_DEBUG"] == "INFO"
    assert next(v for v in template["spec"]["volumes"] if v["name"] == "dshm")["emptyDir"] == {
        "medium": "Memory",
        "sizeLimit": "8Gi",
    }
    assert template["metadata"]["labels"]["team"] == "ml"


def test_gpu_pods_tolerate_the_taint_gpu_node_groups_carry() -> None:
    (taint,) = gpu_node_group_settings(GpuNodeGroupArgs(name="g", instance_types=["g5.xlarge"]))["taints"]
    template = templates(render(gpus=1))[0]
    assert any(tolerates(t, taint) for t in template["spec"]["tolerations"])
    cpu_only = templates(render(**{**FULL, "gpus": 0, "num_proc": 1}))[0]
    assert not any(tolerates(t, taint) for t in cpu_only["spec"]["tolerations"])


def test_headless_service() -> None:
    service = kind_of(render(), "Service")
    assert service["metadata"]["name"] == "demo"
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {
        contract.AGENT_PORT_NAME: contract.AGENT_PORT,
        contract.MASTER_PORT_NAME: contract.DEFAULT_MASTER_PORT,
    }
    pod_labels = templates(render())[0]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()


def test_network_policy_admits_only_job_pods_and_allowed_clients_on_agent_port() -> None:
    policy = kind_of(render(), "NetworkPolicy")["spec"]
    pod_labels = templates(render())[0]["metadata"]["labels"]
    assert policy["policyTypes"] == ["Ingress"]
    assert policy["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert policy["ingress"] == [{"from": [{"podSelector": policy["podSelector"]}]}]
    with_clients = kind_of(render(**FULL), "NetworkPolicy")["spec"]["ingress"]
    assert with_clients[1] == {
        "from": FULL["allow_from"],
        "ports": [{"port": contract.AGENT_PORT, "protocol": "TCP"}],
    }


SINGLE_CONTROLLER_PORTS = {
    "ray": {contract.RAY_HEAD_PORT_NAME: 30032, contract.RAY_CLIENT_PORT_NAME: 30033},
    "monarch": {contract.MONARCH_PORT_NAME: 30032},
}


@pytest.mark.parametrize("distribution", SINGLE_CONTROLLER_PORTS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_single_controller_jobs_validate_and_name_their_framework_ports(distribution: str, backend: str) -> None:
    overrides = {k: v for k, v in BACKENDS[backend][0].items() if k not in ("min_workers", "max_workers")}
    overrides = {**overrides, **FULL, "num_proc": 1, "distribution": distribution, "master_port": 30000}
    if overrides.get("mode") == "service":
        overrides.pop("args")  # a service job runs no entrypoint to take them
    job = render(**overrides)
    for manifest in job.manifests:
        validate_manifest(manifest.body)
    expected = {contract.AGENT_PORT_NAME: contract.AGENT_PORT, **SINGLE_CONTROLLER_PORTS[distribution]}
    service = {p["name"]: p["port"] for p in kind_of(job, "Service")["spec"]["ports"]}
    assert service == {**expected, contract.MASTER_PORT_NAME: 30000}
    for template in templates(job):
        container = {p["name"]: p["containerPort"] for p in template["spec"]["containers"][0]["ports"]}
        assert expected.items() <= container.items()
        env = env_of(template)
        assert env[contract.DISTRIBUTION] == distribution and env[contract.NUM_PROC] == "1"
        if distribution == "ray":
            assert json.loads(env[contract.DAEMON_ARGS]) == ["--num-cpus=7", "--num-gpus=2"]
        else:
            assert contract.DAEMON_ARGS not in env
    assert kind_of(job, "NetworkPolicy")["spec"]["ingress"][0] == {
        "from": [{"podSelector": kind_of(job, "NetworkPolicy")["spec"]["podSelector"]}]
    }, "the job's own pods reach every port, Ray's ephemeral ones included"


def test_statefulset_for_service_mode() -> None:
    job = render(mode="service", workers=3, quorum_workers=2, min_workers=2, max_workers=3)
    body = workload(job)
    spec = body["spec"]
    assert (spec["podManagementPolicy"], spec["replicas"], spec["serviceName"]) == ("Parallel", 3, "demo")
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    container = spec["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"] == {
        "path": contract.ROUTE_HEALTHZ,
        "port": contract.AGENT_PORT_NAME,
    }
    assert container["livenessProbe"]["httpGet"]["path"] == contract.ROUTE_HEALTHZ
    assert spec["template"]["spec"]["restartPolicy"] == "Always"
    assert "annotations" not in body["metadata"], "a plain StatefulSet is awaited (readiness)"
    pdb = kind_of(job, "PodDisruptionBudget")["spec"]
    assert pdb["minAvailable"] == 2
    assert pdb["selector"] == spec["selector"]
    assert env_of(spec["template"])[contract.MODE] == "service"
    assert "PodDisruptionBudget" not in {m.body["kind"] for m in render().manifests}


def test_pythonpath_follows_the_bundle_on_the_agents_pythonpath_and_a_service_job_needs_no_script() -> None:
    env = env_of(templates(render(mode="service", script=None, pythonpath=["/app/examples", "/app/lib"]))[0])
    assert env["PYTHONPATH"] == f"{contract.BUNDLE_MOUNT_PATH}:/app/examples:/app/lib"
    assert contract.ENTRYPOINT not in env, "nothing to run: the agent reads an unset entrypoint as none"


def test_pytorchjob_follows_operator_rules() -> None:
    job = render(
        backend="pytorchjob",
        workers=3,
        num_proc=4,
        ttl_seconds_after_finished=60,
        active_deadline_seconds=7200,
    )
    spec = workload(job)["spec"]
    assert spec["nprocPerNode"] == "4"
    replicas = spec["pytorchReplicaSpecs"]
    assert {k: v["replicas"] for k, v in replicas.items()} == {"Master": 1, "Worker": 2}
    assert spec["runPolicy"] == {
        "cleanPodPolicy": "Running",
        "backoffLimit": 0,
        "activeDeadlineSeconds": 7200,
        "ttlSecondsAfterFinished": 60,
    }
    for replica in replicas.values():
        container = replica["template"]["spec"]["containers"][0]
        assert container["name"] == "pytorch"
        assert {
            "name": "pytorchjob-port",
            "containerPort": contract.DEFAULT_MASTER_PORT,
            "protocol": "TCP",
        } in (container["ports"])
        env = env_of(replica["template"])
        # The operator's MASTER_ADDR/MASTER_PORT/RANK name node 0 and the node rank.
        assert contract.COORDINATOR_HOST not in env and contract.MASTER_PORT not in env
        assert contract.NODE_RANK_SETTING not in env
    assert (
        job.names.coordinator_url == f"http://demo-master-0.default.svc.cluster.local:{contract.AGENT_PORT}"
    )
    assert "Worker" not in workload(render(backend="pytorchjob", workers=1))["spec"]["pytorchReplicaSpecs"]


def test_elastic_pytorchjob_is_worker_only_with_elastic_policy() -> None:
    job = render(backend="pytorchjob", workers=2, min_workers=1, max_workers=4, max_restarts=3)
    spec = workload(job)["spec"]
    assert list(spec["pytorchReplicaSpecs"]) == ["Worker"]
    assert spec["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    assert spec["elasticPolicy"] == {"minReplicas": 1, "maxReplicas": 4, "maxRestarts": 3}
    env = env_of(spec["pytorchReplicaSpecs"]["Worker"]["template"])
    assert env[contract.COORDINATOR_HOST] == "demo-worker-0"
    assert env[contract.MASTER_PORT] == str(contract.DEFAULT_MASTER_PORT)
    assert env[contract.NODE_RANK_SETTING] == {
        "fieldRef": {"fieldPath": "metadata.labels['training.kubeflow.org/replica-index']"}
    }
    assert (env[contract.MIN_WORKERS], env[contract.MAX_WORKERS]) == ("1", "4")


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (lambda s: s["pytorchReplicaSpecs"].pop("Master"), "Worker-only job without elasticPolicy"),
        (
            lambda s: s["pytorchReplicaSpecs"]["Master"].update(replicas=2),
            "Master.replicas must be exactly 1",
        ),
        (lambda s: s["pytorchReplicaSpecs"]["Worker"].update(replicas=0), "Worker.replicas must be >= 1"),
        (
            lambda s: s["pytorchReplicaSpecs"].update(Launcher=s["pytorchReplicaSpecs"]["Worker"]),
            r"replica types \['Launcher'\] are not allowed",
        ),
        (
            lambda s: s["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].update(
                name="agent"
            ),
            "only configures a container named 'pytorch'",
        ),
        (lambda s: s["runPolicy"].update(cleanPodPolicy="None"), "cleanPodPolicy must be 'Running'"),
    ],
)
def test_operator_rules_reject_bad_pytorchjobs(mutate: Any, fragment: str) -> None:
    body = copy.deepcopy(workload(render(backend="pytorchjob", workers=3)))
    mutate(body["spec"])
    with pytest.raises(OperatorRuleError, match=fragment):
        check_pytorchjob(body)


def test_operator_rules_reject_non_dns1035_name() -> None:
    body = copy.deepcopy(workload(render(backend="pytorchjob")))
    body["metadata"]["name"] = "Demo.Job"
    with pytest.raises(OperatorRuleError, match=r"metadata\.name='Demo\.Job'"):
        check_pytorchjob(body)


def test_worker_only_with_elastic_policy_passes_operator_rules() -> None:
    body = workload(render(backend="pytorchjob", min_workers=1, max_workers=2))
    check_pytorchjob(body)
    assert "Master" not in body["spec"]["pytorchReplicaSpecs"]


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


@pytest.mark.parametrize(
    ("gang", "policy"),
    [
        ({"gang_scheduler": "volcano", "queue": "research"}, {"minAvailable": 2, "queue": "research"}),
        (
            {"gang_scheduler": "scheduler-plugins", "quorum_timeout": 60},
            {"minAvailable": 2, "scheduleTimeoutSeconds": 60},
        ),
    ],
)
def test_pytorchjob_gang_goes_through_the_operator(gang: dict[str, Any], policy: dict[str, Any]) -> None:
    job = render(backend="pytorchjob", **gang)
    assert workload(job)["spec"]["runPolicy"]["schedulingPolicy"] == policy
    assert "PodGroup" not in {m.body["kind"] for m in job.manifests}
    assert all("schedulerName" not in t["spec"] for t in templates(job))


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


def test_secret_holds_the_token() -> None:
    secret = kind_of(render(), "Secret")
    assert secret["metadata"]["name"] == "demo-token"
    assert secret["stringData"] == {"token": TOKEN}


def test_manifest_flags() -> None:
    job = render(backend="pytorchjob", gang_scheduler="kueue", cluster_queue="gpu-pool")
    flags = {m.role: (m.custom, m.replace_on, m.after_previous) for m in job.manifests}
    assert flags == {
        "token": (False, (), False),
        "runtime": (False, (), False),
        "service": (False, (), False),
        "localqueue": (True, ("spec.clusterQueue",), False),
        "pytorchjob": (True, ("spec",), True),
        "network-policy": (False, (), False),
    }
    assert {m.role: m.replace_on for m in render().manifests}["indexed-job"] == ("spec",)
    assert {m.role: m.replace_on for m in render(mode="service").manifests}["statefulset"] == ()


def test_render_rejects_a_bad_name() -> None:
    with pytest.raises(ValueError, match=r"name='Demo': not a valid name"):
        render("Demo")


# --- upstream rules: how the rendered workloads behave on a real cluster --------------------------


@pytest.mark.parametrize(
    "overrides",
    [{}, {"gang_scheduler": "volcano"}, {"backend": "pytorchjob"},
     {"backend": "pytorchjob", "gang_scheduler": "volcano"}, {"mode": "service", "gang_scheduler": "volcano"},
     {"mode": "service", "gang_scheduler": "kueue", "queue": "q"}],
    ids=["indexed-job", "indexed-job-volcano", "pytorchjob", "pytorchjob-volcano", "statefulset-volcano",
         "statefulset-kueue"],
)
def test_no_workload_skips_awaiting_its_delete(overrides: dict[str, Any]) -> None:
    """pulumi/pulumi-kubernetes v4.32.0 ``provider/pkg/metadata/overrides.go``: ``pulumi.com/skipAwait``
    also skips awaiting the delete of a ``batch/v1`` Job or an ``apps/v1`` StatefulSet
    (``allowsSkipAwaitWithDelete``); the delete is Foreground (``DeletionPropagation``) and the replacement
    is an immediate Create (``provider/pkg/await/await.go``, ``Creation``, retried only on NotFound), so
    replacing the workload on a changed image fails with ``object is being deleted: jobs.batch "<job>"
    already exists``. ``pulumi.com/waitFor`` (``ReadyCondition``) replaces the wait for completion or
    readiness and leaves the delete awaited."""
    manifest = workload_manifest_of(render(**overrides))
    annotations = manifest.body["metadata"].get("annotations", {})
    assert "pulumi.com/skipAwait" not in annotations
    assert annotations == {"pulumi.com/waitFor": "jsonpath={.metadata.uid}"}


def test_a_plain_service_job_is_awaited_until_ready() -> None:
    """pulumi-kubernetes' StatefulSet await logic waits for every replica to be ready; a ``waitFor``
    would replace it (``provider/pkg/await/await.go``: built-in logic only ``if !custom``)."""
    assert "annotations" not in workload(render(mode="service"))["metadata"]


def test_a_fixed_size_indexed_job_fails_on_its_first_failed_pod() -> None:
    """Kubernetes ``batch/v1`` JobSpec (k8s.io/api): a failed pod that no pod failure policy rule
    ignores increments ``status.failed``, checked against ``backoffLimit``; the Job fails when it is
    exceeded. ``Ignore`` (here ``DisruptionTarget``: preemption, eviction, drain) creates a replacement
    without counting. With ``backoffLimit: 0`` a fixed-size job's first crashed agent fails it."""
    spec = workload(render(workers=3))["spec"]
    assert spec["backoffLimit"] == 0
    assert spec["podFailurePolicy"]["rules"] == [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]
    assert spec["template"]["spec"]["restartPolicy"] == "Never"


@pytest.mark.parametrize(("backoff_limit", "expected"), [(None, 3), (7, 7), (0, 0)])
def test_an_elastic_indexed_job_replaces_a_lost_pod(backoff_limit: Any, expected: int) -> None:
    """Kubernetes ``batch/v1`` JobSpec: while ``status.failed`` stays within ``backoffLimit`` the Job
    controller creates a replacement pod for a failed index (``podReplacementPolicy: Failed``: once the old
    one is fully terminated), which rejoins the running world under its index. An elastic job
    therefore gets a ``backoffLimit`` of ``backoff_limit`` (3 by default)."""
    spec = workload(render(workers=3, min_workers=2, max_workers=3, backoff_limit=backoff_limit))["spec"]
    assert (spec["backoffLimit"], spec["podReplacementPolicy"]) == (expected, "Failed")
    assert spec["template"]["spec"]["restartPolicy"] == "Never"


def test_a_fixed_size_pytorchjob_fails_when_a_pod_fails() -> None:
    """kubeflow/trainer v1.9.4 ``pkg/controller.v1/pytorch/pytorchjob_controller.go`` (``UpdateJobStatus``):
    ``failed > 0`` with a replica ``restartPolicy`` of ``Never`` marks the whole job Failed."""
    spec = workload(render(backend="pytorchjob", workers=3))["spec"]
    assert {r["restartPolicy"] for r in spec["pytorchReplicaSpecs"].values()} == {"Never"}
    assert spec["runPolicy"]["backoffLimit"] == 0


def test_an_elastic_pytorchjob_restarts_a_failed_agent_instead_of_failing() -> None:
    """kubeflow/trainer v1.9.4 ``pkg/controller.v1/pytorch/pytorchjob_controller.go``: a replica whose
    ``restartPolicy`` is not ``Never`` is restarted, not failed; under ``OnFailure`` the kubelet restarts
    the container in its pod (the pod never reaches Failed), and ``pkg/core/job.go`` (``PastBackoffLimit``)
    fails the job once the containers' restarts reach ``runPolicy.backoffLimit``. The replica's policy
    overrides the pod template's, which the operator warns about when set (``pkg/controller.v1/common/
    pod.go``, ``SetPodTemplateRestartPolicy``), so the template leaves it unset."""
    spec = workload(render(backend="pytorchjob", workers=2, min_workers=1, max_workers=4, backoff_limit=5))["spec"]
    (worker,) = spec["pytorchReplicaSpecs"].values()
    assert worker["restartPolicy"] == "OnFailure"
    assert "restartPolicy" not in worker["template"]["spec"]
    assert spec["runPolicy"]["backoffLimit"] == 5


@pytest.mark.parametrize(
    ("overrides", "path", "field"),
    [({}, ("spec",), "activeDeadlineSeconds"), ({"backend": "pytorchjob"}, ("spec", "runPolicy"),
                                                  "activeDeadlineSeconds")],
    ids=["indexed-job", "pytorchjob"],
)
def test_the_job_level_time_limit_is_rendered_where_the_workload_takes_it(overrides, path, field) -> None:
    """Kubernetes ``batch/v1`` JobSpec ``activeDeadlineSeconds`` (the Job controller fails the Job with
    ``DeadlineExceeded``); kubeflow/trainer v1.9.4 ``RunPolicy.activeDeadlineSeconds`` (the operator fails
    the job past it, ``pkg/controller.v1/common/job.go``)."""
    node = workload(render(active_deadline_seconds=3600, **overrides))
    for key in path:
        node = node[key]
    assert node[field] == 3600


def test_pods_stop_within_a_grace_period_that_covers_the_agents() -> None:
    """Kubernetes sends SIGTERM and kills the pod ``terminationGracePeriodSeconds`` later (30 s when
    unset); the agent gives its processes ``TRAINPLANE_GRACE_PERIOD`` between SIGTERM and SIGKILL
    (``runtime.agent.spec.settings``), so a rank's checkpoint-on-SIGTERM needs both to cover it."""
    for template in templates(render(grace_period=45)):
        assert env_of(template)[contract.GRACE_PERIOD] == "45"
        assert template["spec"]["terminationGracePeriodSeconds"] == 55
    default = templates(render())[0]
    assert env_of(default)[contract.GRACE_PERIOD] == "5"
    assert default["spec"]["terminationGracePeriodSeconds"] == 15


def test_resizing_an_elastic_service_job_changes_replicas_not_its_pod_template() -> None:
    """Kubernetes ``apps/v1`` StatefulSet: any change to ``spec.template`` is a rolling update of every
    pod; a change of ``replicas`` only adds or removes pods. An elastic service job's size settings come
    from a ConfigMap (read when each pod starts), so new pods join the running world."""
    small = render(mode="service", workers=2, min_workers=1, max_workers=4)
    large = render(mode="service", workers=3, min_workers=1, max_workers=4)
    assert workload(small)["spec"]["template"] == workload(large)["spec"]["template"]
    assert (workload(small)["spec"]["replicas"], workload(large)["spec"]["replicas"]) == (2, 3)
    size = next(m.body for m in large.manifests if m.role == "size")
    assert size["data"] == {contract.WORKERS: "3", contract.QUORUM_WORKERS: "3"}
    validate_manifest(size)
    env = env_of(workload(large)["spec"]["template"])
    assert env[contract.WORKERS] == {"configMapKeyRef": {"name": "demo-size", "key": contract.WORKERS}}
    assert env[contract.QUORUM_WORKERS] == {"configMapKeyRef": {"name": "demo-size", "key": contract.QUORUM_WORKERS}}
    assert "size" not in {m.role for m in render(mode="service", workers=3).manifests}, "fixed size: no ConfigMap"


def test_a_kueue_service_job_is_replaced_rather_than_patched() -> None:
    """kubernetes-sigs/kueue v0.19.2 ``pkg/controller/jobs/statefulset/statefulset_webhook.go``
    (``ValidateUpdate``): while Kueue manages a StatefulSet, ``replicas`` may change only to or from 0 and
    the pod shape (``ValidateImmutablePodGroupPodSpec``: requests, ports, node selector, tolerations) not
    at all, so trainplane replaces it (deleting first) and Kueue admits the new one."""
    manifest = workload_manifest_of(render(mode="service", gang_scheduler="kueue", queue="team-a"))
    assert manifest.replace_on == ("spec",)
    assert workload_manifest_of(render(mode="service")).replace_on == ()


def test_a_jobs_local_queue_is_replaced_when_its_cluster_queue_changes() -> None:
    """kubernetes-sigs/kueue v0.19.2 ``config/components/crd/bases/kueue.x-k8s.io_localqueues.yaml``:
    ``spec.clusterQueue`` is immutable (``x-kubernetes-validations: self == oldSelf``)."""
    (queue,) = [m for m in render(gang_scheduler="kueue", cluster_queue="gpu-pool").manifests if m.role == "localqueue"]
    assert queue.replace_on == ("spec.clusterQueue",)
