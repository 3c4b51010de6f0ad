"""Kubeflow Trainer v2.3.0's and JobSet v0.12.0's real controller managers (built from their Go modules,
``testbed/cluster/trainer.py``) against the test cluster (issue 24, item 5): the ``TrainerV2`` add-on's
ClusterTrainingRuntime and a ``backend="trainjob"`` DistributedJob's TrainJob pass the Trainer's webhooks, the
Trainer makes a JobSet of them, JobSet its Jobs, the Job controller the pods, which kwok's nodes take.

The objects are ``cluster_training_runtime``'s and ``render_job``'s, the ones the add-on and the component register,
created with the API client (as ``test_workloads.py`` does); the last test sends a DistributedJob through the real
Pulumi engine (the runtime stays the fixture's: the add-on's Helm release cannot fetch its chart here).

Not collected by a plain ``pytest`` (the file name is not ``test_*.py``), so CI does not build the managers. Run it
by path: ``.venv/bin/python -m pytest -q tests/cluster/live_trainer.py`` (the first run builds them:
``python -m testbed.cluster build --with trainer``).
"""

from __future__ import annotations

import dataclasses
import textwrap
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, dynamic
from kubernetes.client.rest import ApiException

from components.addons.trainer_runtime import AGENT_COMMAND, NODE, TRAINER_PORT, cluster_training_runtime
from components.addons.versions import TRAINER_API
from components.job.trainjob_rules import POD_FIELDS_NOT_PATCHED
from components.job.volumes import BUNDLE_VOLUME
from runtime.agent import contract
from runtime.local.launch_plan import free_port
from testbed.cluster import crds, trainer
from testbed.cluster.engine import Engine
from testbed.cluster.lifecycle import Cluster
from testbed.cluster.pki import Pki
from testbed.cluster.project import cluster_stack, copy_project
from testbed.cluster.waiting import wait_for
from tests.cluster.kube import WAIT, apply_crd, create, delete_crd, wait_for_pods
from tests.cluster.test_workloads import deploy, selector
from tests.components.job.jobrender import FULL

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1800)]

CRD_FILES = ("jobset.x-k8s.io_jobsets.yaml", "trainer.kubeflow.org_trainjobs.yaml",
             "trainer.kubeflow.org_clustertrainingruntimes.yaml", "trainer.kubeflow.org_trainingruntimes.yaml")
JOBSET_API = "jobset.x-k8s.io/v1alpha2"


def _ports(count: int, taken: list[int]) -> list[int]:
    out: list[int] = []
    for _ in range(count):
        out.append(free_port("127.0.0.1", avoid=taken + out))
    return out


@contextmanager
def trainer_namespace(cluster: Cluster, api: client.ApiClient, extra_crds: Sequence[str] = ()) -> Iterator[str]:
    """The four CRDs (and the ``extra_crds`` files, before the managers start: the Trainer watches a PodGroup
    kind only if its CRD exists then), JobSet's and the Trainer's managers and webhooks (for one namespace), and
    the add-on's plain runtime; yields the namespace. Everything is removed afterwards, the webhooks first."""
    names = [apply_crd(api, crds.crd_file(f)) for f in (*CRD_FILES, *extra_crds)]
    namespace = f"trainer-{uuid.uuid4().hex[:8]}"
    core, admission = client.CoreV1Api(api), client.AdmissionregistrationV1Api(api)
    core.create_namespace({"metadata": {"name": namespace}})
    wait_for(lambda: core.read_namespaced_service_account("default", namespace), 60, "the default ServiceAccount")
    pki = Pki(cluster.state / "pki")
    running: list[trainer.Running] = []
    hooks: list[dict[str, Any]] = []
    taken: list[int] = []
    try:
        for manager in (trainer.JOBSET, trainer.TRAINER):
            ports = _ports(3, taken)
            taken += ports
            started = trainer.start(manager, cluster.kubeconfig, pki, ports)
            running.append(started)
            for hook in trainer.webhook_configurations(manager, started.webhook_port, pki.ca, [namespace]):
                create(api, hook)
                hooks.append(hook)
        create(api, cluster_training_runtime("none", {contract.LABEL_PART_OF: contract.APP_NAME}))
        yield namespace
    finally:
        for hook in hooks:
            delete = (admission.delete_mutating_webhook_configuration if hook["kind"].startswith("Mutating")
                      else admission.delete_validating_webhook_configuration)
            delete(hook["metadata"]["name"])
        for started in running:
            started.stop()
        core.delete_namespace(namespace)
        for name in names:
            delete_crd(api, name)


@pytest.fixture(scope="module")
def live(cluster: Cluster, api: client.ApiClient) -> Iterator[str]:
    """:func:`trainer_namespace`, for this module."""
    with trainer_namespace(cluster, api) as namespace:
        yield namespace


def jobset(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    resource = dynamic.DynamicClient(api).resources.get(api_version=JOBSET_API, kind="JobSet")
    try:
        return dict(resource.get(name=name, namespace=namespace).to_dict())
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def env_of(container: client.V1Container) -> dict[str, str]:
    return {e.name: e.value for e in container.env or [] if e.value is not None}


def test_a_trainjob_becomes_a_jobset_its_jobs_and_pods_with_the_torch_env_and_the_runtime_patch(
        api: client.ApiClient, live: str) -> None:
    """kubeflow/trainer v2.3.0: the TrainJob's JobSet is named after it and owned by it
    (``pkg/runtime/framework/plugins/jobset/jobset.go``, ``Build``); the torch plugin puts ``PET_NNODES``,
    ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK`` (the completion index), ``PET_MASTER_ADDR`` and ``PET_MASTER_PORT``
    (29500, ``constants.ContainerTrainerPort``) into the ``node`` container only (``pkg/runtime/framework/plugins/
    torch/torch.go``, ``EnforceMLPolicy``); trainplane's runtime patch is merged into the JobSet template
    (``pkg/runtime/core/trainingruntime.go``, ``mergeRuntimePatches``). kubernetes-sigs/jobset v0.12.0: one Job
    ``<jobset>-node-0`` with the runtime's parallelism set to ``numNodes`` (``pkg/controllers/jobset_controller.go``,
    ``constructJob``). So each pod carries the job's labels and annotations, the bundle volume, and runs the
    agent's command with the user's entrypoint as args."""
    rendered, stored = deploy(api, live, name="tj", backend="trainjob", workers=2, num_proc=2)
    name = rendered.names.job
    found = wait_for(lambda: jobset(api, live, name), WAIT, "the Trainer to make the JobSet")
    owners = found["metadata"]["ownerReferences"]
    assert [(o["kind"], o["name"]) for o in owners] == [("TrainJob", name)]
    jobs = wait_for(lambda: client.BatchV1Api(api).list_namespaced_job(live).items or None, WAIT, "JobSet's Jobs")
    assert [j.metadata.name for j in jobs] == [f"{name}-{NODE}-0"]
    assert jobs[0].spec.parallelism == 2
    made = sorted(wait_for_pods(api, live, selector(rendered), 2),
                  key=lambda p: p.metadata.annotations["batch.kubernetes.io/job-completion-index"])
    template = stored["trainjob"]["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]
    patched_pod = template["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    for rank, pod in enumerate(made):
        assert pod.metadata.labels.items() >= patched_pod["metadata"]["labels"].items()
        assert pod.metadata.annotations.items() >= patched_pod["metadata"].get("annotations", {}).items()
        assert BUNDLE_VOLUME in [v.name for v in pod.spec.volumes]
        (node,) = [c for c in pod.spec.containers if c.name == NODE]
        assert node.command == list(AGENT_COMMAND)
        assert node.args == stored["trainjob"]["spec"]["trainer"]["args"]
        env = env_of(node)
        assert env[contract.PET_NNODES] == "2"
        assert env[contract.PET_NPROC_PER_NODE] == "2"
        assert env[contract.PET_MASTER_PORT] == str(TRAINER_PORT)
        assert env[contract.PET_MASTER_ADDR].startswith(f"{name}-{NODE}-0-0.{name}")
        assert contract.PET_NODE_RANK in {e.name for e in node.env}, rank
        assert env[contract.TRAINJOB] == "true"


def test_an_edit_replaces_the_trainjob_which_the_trainer_refuses_to_change(api: client.ApiClient, live: str) -> None:
    """Every field of a TrainJob's spec but ``suspend`` is immutable (kubeflow/trainer v2.3.0
    ``pkg/apis/trainer/v1alpha1/trainjob_types.go``, ``x-kubernetes-validations``): an image change sent as an update
    is refused by the API server, which is why the component replaces the TrainJob on any change."""
    _, stored = deploy(api, live, name="edit", backend="trainjob", workers=1, num_proc=1)
    resource = dynamic.DynamicClient(api).resources.get(api_version=TRAINER_API, kind="TrainJob")
    body = stored["trainjob"]
    body["spec"]["trainer"]["image"] = "python:3.13-slim"
    with pytest.raises(ApiException) as refused:
        resource.replace(body=body, namespace=live)
    assert refused.value.status == 422, refused.value.body
    assert "immutable" in str(refused.value.body), refused.value.body


PROGRAM = textwrap.dedent('''
    import os

    import pulumi
    import pulumi_kubernetes as k8s

    from components.job import DistributedJob, DistributedJobArgs

    provider = k8s.Provider("cluster", kubeconfig=open(os.environ["KUBECONFIG"]).read())
    job = DistributedJob("viaup", DistributedJobArgs(image=os.environ["JOB_IMAGE"], workers=2, num_proc=1,
                                                  script="train.py", backend="trainjob",
                                                  namespace=os.environ["JOB_NAMESPACE"]),
                         opts=pulumi.ResourceOptions(provider=provider))
    pulumi.export("job", job.job_name)
''')


def trainjobs(api: client.ApiClient, namespace: str) -> list[dict[str, Any]]:
    resource = dynamic.DynamicClient(api).resources.get(api_version=TRAINER_API, kind="TrainJob")
    return [dict(t.to_dict()) for t in resource.get(namespace=namespace).items]


def test_pulumi_up_makes_the_trainjob_and_an_image_edit_replaces_it(tmp_path: Path, cluster: Cluster,
                                                                     api: client.ApiClient, live: str) -> None:
    """Through the real engine, the Python language host and ``DistributedJob``: ``up`` creates the TrainJob (the
    Trainer's webhooks admit it) and the Trainer its JobSet; an image edit is a replacement (every TrainJob field
    is immutable: kubeflow/trainer v2.3.0 ``pkg/apis/trainer/v1alpha1/trainjob_types.go``), deleted before the new
    one is created, so the namespace holds one TrainJob with a new uid, whose JobSet's pods run the new image."""
    project = copy_project(tmp_path / "project", "dev", cluster_stack("existing", cluster.kubeconfig).config)
    (project / "__main__.py").write_text(PROGRAM)
    env = {"JOB_NAMESPACE": live, "JOB_IMAGE": "python:3.11-slim"}
    engine = Engine(project, tmp_path / "state", cluster.kubeconfig, env)
    engine.run("stack", "init", "dev")
    try:
        engine.run("up", "--yes", timeout=1200)
        (first,) = [t for t in trainjobs(api, live) if t["metadata"]["name"] == "viaup"]
        wait_for(lambda: jobset(api, live, "viaup"), WAIT, "the Trainer to make the JobSet")
        engine = dataclasses.replace(engine, extra_env={**env, "JOB_IMAGE": "python:3.12-slim"})
        engine.run("up", "--yes", timeout=1200)
        (second,) = [t for t in trainjobs(api, live) if t["metadata"]["name"] == "viaup"]
        assert second["metadata"]["uid"] != first["metadata"]["uid"]
        assert second["spec"]["trainer"]["image"] == "python:3.12-slim"

        def new_jobset() -> dict[str, Any] | None:
            found = jobset(api, live, "viaup")
            owners = (found or {}).get("metadata", {}).get("ownerReferences") or []
            return found if [o["uid"] for o in owners] == [second["metadata"]["uid"]] else None

        wait_for(new_jobset, WAIT, "the Trainer to make the replacement's JobSet")
        engine.run("preview", "--expect-no-changes", timeout=1200)
    finally:
        engine.run("destroy", "--yes", timeout=1200, check=False)
    assert [t for t in trainjobs(api, live) if t["metadata"]["name"] == "viaup"] == []


def test_the_gang_runtimes_and_a_trainjob_of_every_field_pass_the_trainers_webhooks(api: client.ApiClient,
                                                                                     live: str) -> None:
    """The Trainer's ClusterTrainingRuntime webhook admits the coscheduling and Volcano runtimes (kubeflow/trainer
    v2.3.0 ``pkg/webhooks/clustertrainingruntime_webhook.go``), and its TrainJob webhook a TrainJob with every field
    a TrainJob carries (``TRAINJOB_FULL`` of the component tests: GPUs, ``num_proc: auto`` resolved, shared memory,
    tolerations, node selector, env, labels, log dir, allow-from, args; ``pkg/webhooks/trainjob_webhook.go`` runs
    every plugin's ``Validate``: the torch plugin's reserved env, the JobSet plugin's runtime patch checks), which the
    Trainer turns into a JobSet whose pods carry the job's node selector and tolerations (kwok's GPU nodes carry
    no ``nvidia.com/gpu.present`` label, so they stay Pending: only the JobSet and pods' specs are checked)."""
    extensions = dynamic.DynamicClient(api).resources.get(api_version=TRAINER_API, kind="ClusterTrainingRuntime")
    for gang in ("scheduler-plugins", "volcano"):
        body = cluster_training_runtime(gang, {contract.LABEL_PART_OF: contract.APP_NAME})
        create(api, body)
        extensions.delete(name=body["metadata"]["name"])
    full = {k: v for k, v in FULL.items() if k not in ("namespace", *POD_FIELDS_NOT_PATCHED)}
    rendered, _ = deploy(api, live, name="full", backend="trainjob", **full)
    name = rendered.names.job
    wait_for(lambda: jobset(api, live, name), WAIT, "the Trainer to make the JobSet")
    made = wait_for_pods(api, live, selector(rendered), FULL["workers"], bound=False)
    for pod in made:
        assert pod.spec.node_selector == FULL["node_selector"]
        assert any((t.key, t.value, t.effect) == ("team", "ml", "NoSchedule") for t in pod.spec.tolerations)
        (node,) = [c for c in pod.spec.containers if c.name == NODE]
        assert node.resources.limits["nvidia.com/gpu"] == "2"
        assert env_of(node)["NCCL_DEBUG"] == "INFO"
