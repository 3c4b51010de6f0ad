"""A rendered PyTorchJob against the training operator's rules, and its gang scheduled through the operator."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from components.errors import OperatorRuleError
from components.job.workloads import check_pytorchjob
from runtime.agent import contract
from tests.components.job.jobrender import (
    env_of,
    render,
    templates,
    workload,
)

pytestmark = pytest.mark.unit


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
