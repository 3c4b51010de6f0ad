"""The pure builders: every rendered object against its schema, and the fields of the pods, the services,
the network policy, the token and the manifests that matter."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema
import pytest

from components.cluster import GpuNodeGroupArgs
from components.cluster.eks import gpu_node_group_settings
from components.job.render import JOB_IMMUTABLE
from runtime.agent import contract
from tests.components.componenttest import TOKEN, tolerates
from tests.components.job.jobrender import (
    BACKENDS,
    BUNDLE,
    FULL,
    GANGS,
    env_of,
    expected_kinds,
    kind_of,
    render,
    templates,
    within_kueue,
    workload,
)
from tests.components.schemacheck import validate_manifest

pytestmark = pytest.mark.unit


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
    # One writer for pods and local agents (runtime/agent/spec/env_writer.py): every setting with a
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
    assert {m.role: m.replace_on for m in render().manifests}["indexed-job"] == JOB_IMMUTABLE
    assert "spec.ttlSecondsAfterFinished" not in JOB_IMMUTABLE and "spec.template" in JOB_IMMUTABLE
    assert {m.role: m.replace_on for m in render(mode="service").manifests}["statefulset"] == ()


def test_render_rejects_a_bad_name() -> None:
    with pytest.raises(ValueError, match=r"name='Demo': not a valid name"):
        render("Demo")
