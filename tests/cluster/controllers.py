"""The live tests' controllers, each run as a process with what its add-on renders and the objects it needs in the
cluster (CRDs, namespaces, webhook configurations), removed again afterwards: the training operator
(``testbed/cluster/training_operator.py``), Kueue's manager (``testbed/cluster/kueue.py``) and the Trainer's and
JobSet's managers (``testbed/cluster/trainer.py``)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import yaml
from kubernetes import client, dynamic
from kubernetes.client.exceptions import ApiException

from components.addons.kueue import KueueArgs, chart_values, cluster_queue, local_queue, resource_flavor
from components.addons.trainer_runtime import cluster_training_runtime
from components.addons.versions import KUEUE_API
from runtime.agent import contract
from runtime.local.launch_plan import free_port
from testbed.cluster import crds, kueue, trainer, training_operator
from testbed.cluster.lifecycle import Cluster
from testbed.cluster.pki import Pki
from testbed.cluster.waiting import wait_for
from tests.cluster.kube import WAIT, apply_crd, create, delete_crd


@dataclass(frozen=True)
class LiveOperator:
    """The running operator and the namespace its webhooks admit."""

    operator: training_operator.Operator
    namespace: str


def loopback_ports(count: int) -> list[int]:
    """``count`` distinct free ports on 127.0.0.1."""
    ports: list[int] = []
    for _ in range(count):
        ports.append(free_port("127.0.0.1", avoid=ports))
    return ports


@contextmanager
def running_operator(cluster: Cluster, api: client.ApiClient,
                     gang_scheduler_name: str | None) -> Iterator[LiveOperator]:
    """The PyTorchJob CRD, the operator's namespace, certificate Secret and webhook configuration (for one fresh
    namespace), and the operator with the flags the ``TrainingOperator`` add-on renders for
    ``gang_scheduler_name`` (``TrainingOperatorArgs.gang_scheduler_name``); all removed afterwards, the webhooks
    first. With a gang scheduler its PodGroup CRD must be in place already (the operator checks at start-up)."""
    core, admission = client.CoreV1Api(api), client.AdmissionregistrationV1Api(api)
    crd = apply_crd(api, crds.crd_file("kubeflow.org_pytorchjobs.yaml"))
    namespace = f"op-{uuid.uuid4().hex[:8]}"
    for name in (training_operator.NAMESPACE, namespace):
        core.create_namespace({"metadata": {"name": name}})
    wait_for(lambda: core.read_namespaced_service_account("default", namespace), WAIT, "the default ServiceAccount")
    ports = loopback_ports(3)
    secret = create(api, training_operator.certificate_secret())
    hook = create(api, training_operator.webhook_configuration(ports[2], [namespace]))
    started = None
    try:
        started = training_operator.start(training_operator.rendered_args(gang_scheduler_name), secret,
                                          cluster.kubeconfig, ports)
        yield LiveOperator(started, namespace)
    finally:
        admission.delete_validating_webhook_configuration(hook["metadata"]["name"])
        if started is not None:
            started.stop()
        for name in (training_operator.NAMESPACE, namespace):
            core.delete_namespace(name)
        delete_crd(api, crd)


@dataclass(frozen=True)
class LiveKueue:
    """The running manager and the namespace its webhooks admit."""

    manager: kueue.KueueManager
    namespace: str


@contextmanager
def kueue_crds(api: client.ApiClient) -> Iterator[None]:
    """Kueue's CRDs (generated from its module, ``kueue.manifests``), Established; deleted afterwards."""
    extensions = client.ApiextensionsV1Api(api)
    names = []
    try:
        for path in kueue.manifests().crds:
            body = yaml.safe_load(path.read_text())
            extensions.create_custom_resource_definition(body)
            names.append(body["metadata"]["name"])

        def established() -> bool:
            return all(any(c.type == "Established" and c.status == "True"
                           for c in extensions.read_custom_resource_definition(n).status.conditions or [])
                       for n in names)

        wait_for(established, WAIT, "Kueue's CRDs to be Established")
        yield
    finally:
        for name in names:
            delete_crd(api, name)


def _gone(read: Callable[[], object]) -> bool:
    try:
        read()
    except ApiException as err:
        if err.status == 404:
            return True
        raise
    return False


@contextmanager
def running_kueue(cluster: Cluster, api: client.ApiClient, namespace: str, args: KueueArgs,
                  rendered: str | None = None) -> Iterator[LiveKueue]:
    """Kueue's manager with the config the ``Kueue`` add-on renders for ``args`` (or ``rendered``, a manager config
    as YAML; its CRDs in place already), the namespace ``namespace`` with Kueue's webhooks for it alone, and the
    add-on's flavors and queues.

    Afterwards the namespace goes first and then the queues, each waited for while the manager still runs (it
    takes off the finalizers it put on pods, Workloads and queues), then the webhooks and the manager."""
    core, admission = client.CoreV1Api(api), client.AdmissionregistrationV1Api(api)
    custom = client.CustomObjectsApi(api)
    for name in ("kueue-system", namespace):
        core.create_namespace({"metadata": {"name": name}})
    wait_for(lambda: core.read_namespaced_service_account("default", namespace), WAIT, "the default ServiceAccount")
    if rendered is None:
        rendered = chart_values(args)["managerConfig"]["controllerManagerConfigYaml"]
    pki = Pki(cluster.state / "pki")
    manager = kueue.start(rendered, cluster.kubeconfig, pki, loopback_ports(3))
    hooks = kueue.webhook_configurations(kueue.manifests().webhooks, manager.webhook_port, pki.ca, [namespace])
    queues = [*map(resource_flavor, args.flavors), *map(cluster_queue, args.cluster_queues),
              *map(local_queue, args.local_queues)]
    try:
        for hook in hooks:
            create(api, hook)
        for obj in queues:
            create(api, obj)
        yield LiveKueue(manager, namespace)
    finally:
        core.delete_namespace(namespace)
        wait_for(lambda: _gone(lambda: core.read_namespace(namespace)), WAIT, f"namespace {namespace} to go")
        for obj in reversed(queues):
            group, version = obj["apiVersion"].split("/")
            plural, name = obj["kind"].lower() + "s", obj["metadata"]["name"]
            if "namespace" in obj["metadata"]:
                continue  # went with the namespace
            custom.delete_cluster_custom_object(group, version, plural, name)
            wait_for(lambda: _gone(lambda: custom.get_cluster_custom_object(group, version, plural, name)),  # noqa: B023
                     WAIT, f"{obj['kind']} {name} to go")
        for hook in hooks:
            delete = (admission.delete_mutating_webhook_configuration if hook["kind"].startswith("Mutating")
                      else admission.delete_validating_webhook_configuration)
            delete(hook["metadata"]["name"])
        manager.stop()
        core.delete_namespace("kueue-system")
        wait_for(lambda: _gone(lambda: core.read_namespace("kueue-system")), WAIT, "namespace kueue-system to go")


def workload_of(api: client.ApiClient, namespace: str, name: str, kind: str = "Job") -> dict[str, Any] | None:
    """The Workload Kueue made for the ``kind`` ``name`` (one of its owners), or None yet."""
    resource = dynamic.DynamicClient(api).resources.get(api_version=KUEUE_API, kind="Workload")
    for found in resource.get(namespace=namespace).items:
        owners = found.metadata.get("ownerReferences") or []
        if any(o["kind"] == kind and o["name"] == name for o in owners):
            return dict(found.to_dict())
    return None


def condition(workload: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    """The Workload's condition of type ``kind`` (a dict with ``status``, ``reason``, ``message``...), or None."""
    if workload is None:
        return None
    return next((c for c in workload.get("status", {}).get("conditions", []) if c["type"] == kind), None)


TRAINER_CRD_FILES = ("jobset.x-k8s.io_jobsets.yaml", "trainer.kubeflow.org_trainjobs.yaml",
                     "trainer.kubeflow.org_clustertrainingruntimes.yaml", "trainer.kubeflow.org_trainingruntimes.yaml")


@contextmanager
def trainer_crds(api: client.ApiClient, extra_crds: Sequence[str] = ()) -> Iterator[None]:
    """JobSet's and the Trainer's CRDs and the ``extra_crds`` files (``crds.crd_file`` names), Established;
    deleted afterwards."""
    names = []
    try:
        for name in (*TRAINER_CRD_FILES, *extra_crds):
            names.append(apply_crd(api, crds.crd_file(name)))
        yield
    finally:
        for name in names:
            delete_crd(api, name)


@contextmanager
def trainer_managers(cluster: Cluster, api: client.ApiClient, namespace: str) -> Iterator[None]:
    """JobSet's and the Trainer's managers, their webhooks admitting ``namespace`` (which exists, with its
    ServiceAccount), and the ``TrainerV2`` add-on's plain ClusterTrainingRuntime; the webhooks and the managers
    are removed afterwards (the runtime goes with the CRDs, :func:`trainer_crds`)."""
    core, admission = client.CoreV1Api(api), client.AdmissionregistrationV1Api(api)
    wait_for(lambda: core.read_namespaced_service_account("default", namespace), 60, "the default ServiceAccount")
    pki = Pki(cluster.state / "pki")
    running: list[trainer.Running] = []
    hooks: list[dict[str, Any]] = []
    runtime = cluster_training_runtime("none", {contract.LABEL_PART_OF: contract.APP_NAME})
    try:
        for manager in (trainer.JOBSET, trainer.TRAINER):
            started = trainer.start(manager, cluster.kubeconfig, pki, loopback_ports(3))
            running.append(started)
            for hook in trainer.webhook_configurations(manager, started.webhook_port, pki.ca, [namespace]):
                create(api, hook)
                hooks.append(hook)
        create(api, runtime)
        yield
    finally:
        for hook in hooks:
            delete = (admission.delete_mutating_webhook_configuration if hook["kind"].startswith("Mutating")
                      else admission.delete_validating_webhook_configuration)
            delete(hook["metadata"]["name"])
        for started in running:
            started.stop()
