"""A ``KubernetesCompute`` job whose objects went away outside Pulumi (its StatefulSet deleted with
kubectl, its namespace deleted) is noticed at once: a 404 is not slowness. Against the stand-in API
server (``fake_apiserver``) through the real ``kubernetes`` client, and the fake stacks seam whose
``up`` without ``--refresh`` makes nothing for objects its state still holds, as Pulumi's engine
diffs against its state (pulumi/pulumi ``pkg/engine``: refresh reads each resource back first,
``pulumi up --refresh``, ``UpOptions.refresh`` in ``sdk/python/lib/pulumi/automation/_stack.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubernetes import config

from runtime.workflow import DeployError, KubernetesCompute, fn
from runtime.workflow.objects import POD_APPEAR_TIMEOUT, JobObjects, Vanishing, look_with
from testbed import service_fns
from tests.conftest import ROOT
from tests.runtime.kubecluster import FakeCluster

pytestmark = pytest.mark.process

IMAGE = "registry.example/trainer:1"


def compute_on(cluster: FakeCluster) -> KubernetesCompute:
    return KubernetesCompute(image=IMAGE, namespace="research", kubeconfig=cluster.kubeconfig(),
                             pythonpath=[str(ROOT)], stacks=cluster, ready_timeout=600.0, name="trainer")


def port_forwards(requests: list[tuple[str, str]]) -> list[int]:
    return [i for i, (path, _auth) in enumerate(requests) if path.endswith("/portforward?ports=32300")]


def test_a_job_whose_statefulset_was_deleted_is_redeployed_with_a_refresh_at_once(cluster: FakeCluster):
    first = compute_on(cluster)
    before = fn(service_fns.whoami).to(first)()
    first.release()
    cluster.delete("trainer", "workload")
    seen = len(cluster.api.requests)

    again = compute_on(cluster)
    results = fn(service_fns.whoami).to(again)()

    assert again.last_deploy == "redeployed"
    assert cluster.calls[-2:] == [("outputs", "trainer"), ("up --refresh", "trainer")]
    later = cluster.api.requests[seen:]
    looked = [path for path, _ in later[:port_forwards(later)[0]]]
    assert looked == ["/api/v1/namespaces/research", "/apis/apps/v1/namespaces/research/statefulsets/trainer",
                      "/api/v1/namespaces/research/pods/trainer-0"], "it looked before any port-forward"
    assert [r["rank"] for r in results] == [0] and results[0]["pid"] != before[0]["pid"], "a new job serves"
    again.teardown()


def test_a_job_whose_namespace_is_gone_fails_at_once_saying_what_to_run(cluster: FakeCluster):
    first = compute_on(cluster)
    fn(service_fns.rank).to(first)
    first.release()
    cluster.delete("trainer", "namespace")
    calls, seen = len(cluster.calls), len(cluster.api.requests)

    with pytest.raises(DeployError) as info:
        fn(service_fns.rank).to(compute_on(cluster))

    assert str(info.value) == (
        "job trainer: namespace research is gone (deleted, with the job's objects in it). KubernetesCompute does "
        "not make namespaces: create it (kubectl create namespace research) and run the driver again, which "
        "deploys the job afresh (pulumi up --refresh); or remove the job's stack with "
        "KubernetesCompute(..., name='trainer').destroy()")
    assert cluster.calls[calls:] == [("outputs", "trainer")], "no update"
    assert not port_forwards(cluster.api.requests[seen:]), "and no wait"


def test_looking_through_the_kubernetes_client_tells_gone_from_unknown(cluster: FakeCluster, tmp_path: Path):
    fn(service_fns.rank).to(compute_on(cluster)).close()
    look = look_with(config.new_client_from_config(config_file=cluster.kubeconfig()))
    assert look("research", "trainer") == JobObjects(True, True, True)
    assert look("research", "other") == JobObjects(True, False, False)
    cluster.gone_namespaces.add("research")
    assert look("research", "trainer") == JobObjects(False, False, False)
    wrong = tmp_path / "wrong-token"
    data = json.loads(Path(cluster.kubeconfig()).read_text())
    data["users"][0]["user"]["token"] = "not-the-token"
    wrong.write_text(json.dumps(data))
    refused = look_with(config.new_client_from_config(config_file=str(wrong)))
    assert refused("research", "trainer") == JobObjects(None, None, None), "401 is not 'gone'"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_wait_ends_when_the_objects_go_or_node_0s_pod_never_appears():
    clock, answers, looks = Clock(), [JobObjects(True, True, False)], []

    def look(namespace: str, job: str) -> JobObjects:
        looks.append((namespace, job))
        return answers[-1]

    failing = [False]
    stop = Vanishing(look, namespace="research", job="trainer", failing=lambda: failing[0], clock=clock)
    assert stop() is None and not looks, "a port-forward that works is not looked into"
    failing[0] = True
    assert stop() is None and looks == [("research", "trainer")]
    clock.now = 1.0
    assert stop() is None and len(looks) == 1, "looks are spaced"
    clock.now = POD_APPEAR_TIMEOUT - 1
    assert stop() is None
    clock.now = POD_APPEAR_TIMEOUT + 1
    assert stop() == (f"the StatefulSet trainer has made no pod trainer-0 in {POD_APPEAR_TIMEOUT:g} s; its events say "
                      "why (a quota, an admission webhook): kubectl describe statefulset trainer -n research")
    answers.append(JobObjects(True, True, True))
    clock.now += 10
    assert stop() is None, "a pod that exists and starts is waited for"
    answers.append(JobObjects(None, None, None))
    clock.now += 10
    assert stop() is None, "what cannot be read is not gone"
    answers.append(JobObjects(True, False, False))
    clock.now += 10
    assert stop() == ("the job's StatefulSet trainer is gone from namespace research (deleted outside Pulumi); run "
                      "the driver again to deploy it afresh (its stack is refreshed first), or remove it with "
                      "KubernetesCompute(..., name='trainer').destroy()")
