"""The live tests' controllers, each run as a process with what its add-on renders and the objects it needs in the
cluster (CRDs, namespaces, webhook configurations), removed again afterwards: the training operator
(``testbed/cluster/training_operator.py``) and Kueue's manager (``testbed/cluster/kueue.py``)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import yaml
from kubernetes import client, dynamic
from kubernetes.client.exceptions import ApiException

from components.addons.kueue import KueueArgs, chart_values, cluster_queue, local_queue, resource_flavor
from components.addons.versions import KUEUE_API
from runtime.local.launch_plan import free_port
from testbed.cluster import crds, kueue, training_operator
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
