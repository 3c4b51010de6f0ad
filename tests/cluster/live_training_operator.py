"""The Kubeflow training operator v1.9.4, built from its Go module (``testbed/cluster/training_operator.py``) and
run with the add-on's flags against the test cluster, reconciles the PyTorchJob a DistributedJob with
``backend="pytorchjob"`` registers through the real Pulumi engine: its pods (bound to kwok nodes), its
per-replica Services, the env the agents read; an edit of the job replaces it and the operator's pods with it; a
deleted worker of an elastic PyTorchJob comes back with the lost pod's index and env, the others untouched.
The operator with ``--gang-scheduler-name`` is in ``live_coscheduling.py``.

All three passed on 2026-12-03, the elastic replacement test included: 53 s here (the operator's cold build
took 1136 s at load 30-190, 201 s of CPU; 217 s on 2026-12-03 with the Go module cache warm). The program runs
on the Python host: the YAML host cannot register a CustomResource (pulumi/pulumi-kubernetes#1971).

What the component relies on, each read in kubeflow/trainer (training-operator) v1.9.4:

- pod and Service names ``<job>-<replica type>-<index>`` (``pkg/controller.v1/pytorch/envvar.go``, ``replicaName``;
  ``pkg/core/service.go``), one headless Service per pod (``pkg/controller.v1/common/service.go``,
  ``CreateNewService``: ``ClusterIP: None``) with every named port of the container (``pytorchjob-port`` and
  the agent's: ``pkg/core/service.go``, ``GetPortsFromJob``);
- in the ``pytorch`` container: ``MASTER_ADDR``/``PET_MASTER_ADDR`` = ``<job>-master-0``, ``MASTER_PORT`` = the
  container port named ``pytorchjob-port``, ``RANK``/``PET_NODE_RANK`` = Master 0, Worker i+1, ``PET_NNODES`` =
  the replica count and ``WORLD_SIZE`` = replicas x ``nprocPerNode`` (``envvar.go``, ``setPodEnv``;
  ``master.go``); the agent takes its node id from ``RANK`` and its coordinator from ``MASTER_ADDR``
  (``runtime/agent/spec/agent_settings.py``), checked here on the pods' own env;
- an edit of ``spec`` replaces the PyTorchJob (the component's ``replaceOnChanges: [spec]``,
  ``deleteBeforeReplace``): the old pods go with it (owner references) and the operator makes the new world.

Not collected by a plain ``pytest`` (CI does not build the operator; its cold build time is in
``testbed/cluster/training_operator.py``). Run it by path:
``.venv/bin/python -m pytest -q tests/cluster/live_training_operator.py`` (the first run builds the operator).
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from components.job.render import RenderedJob
from components.job.workloads import PYTORCH_REPLICA_INDEX_LABEL
from runtime.agent.spec.agent_settings import identity_from_env
from testbed.cluster import nodes, training_operator
from testbed.cluster.engine import Engine
from testbed.cluster.lifecycle import Cluster
from testbed.cluster.project import cluster_stack, copy_project
from testbed.cluster.waiting import wait_for
from tests.cluster.controllers import LiveOperator, running_operator
from tests.cluster.kube import WAIT, live, pods
from tests.cluster.test_engine import rendered
from tests.cluster.test_workloads import deploy, selector

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1800)]

PORT_NAME = "pytorchjob-port"


@pytest.fixture(scope="module")
def operator(cluster: Cluster, api: client.ApiClient) -> Iterator[LiveOperator]:
    """The operator with the add-on's flags (no gang scheduler), its CRD, namespaces and webhooks
    (``tests/cluster/controllers.py``)."""
    with running_operator(cluster, api, None) as running:
        yield running


def env_of(pod: client.V1Pod) -> dict[str, str]:
    """The ``pytorch`` container's literal env (``valueFrom`` entries left out)."""
    container = next(c for c in pod.spec.containers if c.name == "pytorch")
    return {e.name: e.value for e in container.env or [] if e.value is not None}


def owned_pods(api: client.ApiClient, namespace: str, job: RenderedJob, uid: str, count: int) -> list[client.V1Pod]:
    """The job's ``count`` pods once every one of them is owned by the PyTorchJob ``uid`` and bound."""
    def found() -> list[client.V1Pod] | None:
        now = pods(api, namespace, selector(job))
        owned = [p for p in now if any(o.uid == uid for o in p.metadata.owner_references or [])]
        return owned if len(now) == count and len(owned) == count and all(p.spec.node_name for p in owned) else None

    return wait_for(found, WAIT, f"{count} bound pods of PyTorchJob {uid}")


def pytorchjob_uid(api: client.ApiClient, job: RenderedJob) -> str:
    stored = live(api, next(m.body for m in job.manifests if m.role == "pytorchjob"))
    assert stored is not None
    return str(stored["metadata"]["uid"])


def check_world(api: client.ApiClient, namespace: str, job: RenderedJob, uid: str, workers: int) -> None:
    """The operator's pods and Services of a fixed-size job of ``workers`` nodes (one Master)."""
    name = job.names.job
    found = owned_pods(api, namespace, job, uid, workers)
    expected = [f"{name}-master-0", *(f"{name}-worker-{i}" for i in range(workers - 1))]
    assert sorted(p.metadata.name for p in found) == sorted(expected)
    assert {p.spec.node_name for p in found} <= set(nodes.CPU_NODES)
    port = next(p.container_port for c in found[0].spec.containers for p in c.ports or [] if p.name == PORT_NAME)
    procs = next(m.body for m in job.manifests if m.role == "pytorchjob")["spec"]["nprocPerNode"]
    for pod in found:
        env = env_of(pod)
        rank = 0 if pod.metadata.name.endswith("-master-0") else int(pod.metadata.name.rsplit("-", 1)[1]) + 1
        assert {k: env.get(k) for k in ("MASTER_ADDR", "PET_MASTER_ADDR", "MASTER_PORT", "PET_MASTER_PORT", "RANK",
                                        "PET_NODE_RANK", "PET_NNODES", "WORLD_SIZE", "PET_NPROC_PER_NODE")} == {
            "MASTER_ADDR": f"{name}-master-0", "PET_MASTER_ADDR": f"{name}-master-0", "MASTER_PORT": str(port),
            "PET_MASTER_PORT": str(port), "RANK": str(rank), "PET_NODE_RANK": str(rank), "PET_NNODES": str(workers),
            "WORLD_SIZE": str(workers * int(procs)), "PET_NPROC_PER_NODE": procs}, pod.metadata.name
        identity = identity_from_env(env)
        assert (identity.node_id, identity.coordinator) == (rank, f"{name}-master-0"), pod.metadata.name

    def services() -> list[client.V1Service] | None:
        listed = client.CoreV1Api(api).list_namespaced_service(
            namespace, label_selector=f"training.kubeflow.org/job-name={name}").items
        owned = [s for s in listed if any(o.uid == uid for o in s.metadata.owner_references or [])]
        return owned if len(owned) == workers else None

    made = wait_for(services, WAIT, f"the operator's {workers} Services")
    assert sorted(s.metadata.name for s in made) == sorted(expected)
    # Every named port of the ``pytorch`` container, the agent's among them (v1.9.4 ``pkg/core/service.go``,
    # ``GetPortsFromJob``: all of the default container's ports, by name), so a pod's agent is reachable through
    # its Service too.
    named = sorted((p.name, p.container_port) for c in found[0].spec.containers if c.name == "pytorch"
                   for p in c.ports or [] if p.name)
    assert (PORT_NAME, port) in named
    for service in made:
        assert service.spec.cluster_ip == "None", service.metadata.name
        assert sorted((p.name, p.port) for p in service.spec.ports) == named, service.metadata.name


def running_conditions(stored: dict[str, Any] | None) -> set[str]:
    """The PyTorchJob's true condition types (``Created``, ``Running``...: the operator's ``UpdateJobStatus`` sets
    ``Running`` once kwok reports the pods Running)."""
    return {c["type"] for c in ((stored or {}).get("status") or {}).get("conditions", []) if c["status"] == "True"}


def test_the_operator_runs_with_the_addons_flags(operator: LiveOperator) -> None:
    """The process's arguments begin with the release Deployment's own (none: ``/manager`` alone), and with a gang
    scheduler the add-on's transform adds exactly ``--gang-scheduler-name``."""
    assert training_operator.rendered_args(None) == []
    assert training_operator.rendered_args("volcano") == ["--gang-scheduler-name=volcano"]
    assert operator.operator.process.poll() is None


PROGRAM = textwrap.dedent('''
    import os

    import pulumi
    import pulumi_kubernetes as k8s

    from components.job import DistributedJob, DistributedJobArgs

    provider = k8s.Provider("cluster", kubeconfig=open(os.environ["KUBECONFIG"]).read())
    job = DistributedJob("demo", DistributedJobArgs(image="python:3.11-slim", workers=int(os.environ["JOB_WORKERS"]),
                                                 num_proc=2, script="train.py", backend="pytorchjob",
                                                 namespace=os.environ["JOB_NAMESPACE"]),
                         opts=pulumi.ResourceOptions(provider=provider))
    pulumi.export("job", job.job_name)
''')
"""The stack's program: a PyTorchJob registers as a CustomResource, which the YAML language host cannot
register (pulumi/pulumi-kubernetes#1971), so it runs on the Python host, as a user's program would."""


def test_a_pytorchjob_through_the_engine_gets_the_operators_pods_services_and_env_then_an_edit_replaces_them(
        tmp_path: Path, cluster: Cluster, api: client.ApiClient, operator: LiveOperator) -> None:
    """``up`` of a two-node PyTorchJob gets the operator's pods, Services and env and its ``Running`` condition;
    growing it to three nodes replaces it (the component replaces a PyTorchJob on a size change) with the
    operator's three pods under the new uid; ``destroy`` takes the pods with it."""
    namespace = operator.namespace
    job = rendered(namespace, backend="pytorchjob", workers=2)
    project = copy_project(tmp_path / "project", "dev", cluster_stack("existing", cluster.kubeconfig).config)
    (project / "__main__.py").write_text(PROGRAM)
    env = {"JOB_NAMESPACE": namespace, "JOB_WORKERS": "2"}
    engine = Engine(project, tmp_path / "state", cluster.kubeconfig, env)
    engine.run("stack", "init", "dev")
    grown = rendered(namespace, backend="pytorchjob", workers=3)
    try:
        engine.run("up", "--yes", timeout=1200)
        first = pytorchjob_uid(api, job)
        check_world(api, namespace, job, first, 2)
        body = next(m.body for m in job.manifests if m.role == "pytorchjob")
        wait_for(lambda: "Running" in running_conditions(live(api, body)), WAIT, "the PyTorchJob's Running condition")

        engine = dataclasses.replace(engine, extra_env={**env, "JOB_WORKERS": "3"})
        out = engine.run("up", "--yes", timeout=1200).stdout
        assert "replaced" in out, out
        second = pytorchjob_uid(api, grown)
        assert second != first
        check_world(api, namespace, grown, second, 3)
    finally:
        engine.run("destroy", "--yes", timeout=1200, check=False)
    wait_for(lambda: pods(api, namespace, selector(grown)) == [], WAIT, "the operator's pods to go")


def node_env(pod: client.V1Pod) -> dict[str, str]:
    """The ``pytorch`` container's env as the agent sees it: the literal entries, and the node rank resolved from
    the pod label its ``valueFrom`` names (the downward API)."""
    env = env_of(pod)
    container = next(c for c in pod.spec.containers if c.name == "pytorch")
    for entry in container.env or []:
        ref = entry.value_from.field_ref if entry.value_from is not None else None
        if ref is not None and ref.field_path == f"metadata.labels['{PYTORCH_REPLICA_INDEX_LABEL}']":
            env[entry.name] = pod.metadata.labels[PYTORCH_REPLICA_INDEX_LABEL]
    return env


def test_an_elastic_pytorchjobs_deleted_worker_comes_back_under_the_operators_rules(
        api: client.ApiClient, operator: LiveOperator) -> None:
    """An elastic PyTorchJob (Workers only, ``elasticPolicy``, ``restartPolicy: OnFailure``) whose worker pod is
    deleted gets it back from the operator, read in kubeflow/trainer (training-operator) v1.9.4:

    - ``pkg/controller.v1/common/pod.go``, ``ReconcilePods``: an index of a replica type with no pod gets a new one,
      ``<job>-worker-<index>``, labelled with that ``training.kubeflow.org/replica-index`` (``createNewPod``); the
      pods of the other indexes are left alone;
    - ``pkg/controller.v1/pytorch/pytorchjob_controller.go``, ``UpdateJobStatus``: a deleted pod is no failed
      replica, so the job stays ``Running`` and gets no ``Restarting`` or ``Failed`` condition;
    - ``pkg/controller.v1/pytorch/elastic.go`` and ``envvar.go``: the new pod's env is the lost one's (the
      rendezvous endpoint on ``<job>-worker-0``, the node count bounds), and its node rank, read by the agent from
      the replica-index label, is the lost pod's index.
    """
    namespace = operator.namespace
    job, stored = deploy(api, namespace, name="elastic", backend="pytorchjob", workers=3, min_workers=2,
                         max_workers=3)
    spec = stored["pytorchjob"]["spec"]
    assert set(spec["pytorchReplicaSpecs"]) == {"Worker"} and "elasticPolicy" in spec
    uid = str(stored["pytorchjob"]["metadata"]["uid"])
    name = job.names.job
    first = {p.metadata.name: p for p in owned_pods(api, namespace, job, uid, 3)}
    assert sorted(first) == [f"{name}-worker-{i}" for i in range(3)]
    body = next(m.body for m in job.manifests if m.role == "pytorchjob")
    wait_for(lambda: "Running" in running_conditions(live(api, body)), WAIT, "the PyTorchJob's Running condition")

    lost = first[f"{name}-worker-1"]
    client.CoreV1Api(api).delete_namespaced_pod(lost.metadata.name, namespace)

    def replaced() -> dict[str, client.V1Pod] | None:
        now = {p.metadata.name: p for p in owned_pods(api, namespace, job, uid, 3)}
        back = now.get(lost.metadata.name)
        return now if back is not None and back.metadata.uid != lost.metadata.uid else None

    second = wait_for(replaced, WAIT, "the operator to recreate the deleted worker")
    assert sorted(second) == sorted(first)
    assert {n: p.metadata.uid for n, p in second.items() if n != lost.metadata.name} == {
        n: p.metadata.uid for n, p in first.items() if n != lost.metadata.name}
    back = second[lost.metadata.name]
    assert back.metadata.labels[PYTORCH_REPLICA_INDEX_LABEL] == "1"
    assert back.spec.restart_policy == "OnFailure"
    assert node_env(back) == node_env(lost)
    identity = identity_from_env(node_env(back))
    assert (identity.node_id, identity.coordinator) == (1, f"{name}-worker-0")
    conditions = running_conditions(live(api, body))
    assert "Running" in conditions and not conditions & {"Restarting", "Failed"}, conditions
