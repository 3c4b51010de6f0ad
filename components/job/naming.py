"""Names derived from a job's name: objects, DNS names of node 0, and the outputs built from them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from components.job.args import PYTORCHJOB, DistributedJobArgs

PYTORCH_MASTER = "Master"
PYTORCH_WORKER = "Worker"
DEFAULT_NAMESPACE = "default"


@dataclass(frozen=True)
class JobNames:
    """Every Kubernetes name and address a job uses.

    Attributes:
        job: the job (and workload, PodGroup, NetworkPolicy, PDB) name.
        namespace: the namespace of every object.
        service: the headless Service; pods are ``<pod-host>.<service>``.
        token_secret: the Secret holding the job token.
        runtime_configmap: the ConfigMap holding the agent's source files.
        size_configmap: the ConfigMap holding an elastic service job's size settings.
        service_fqdn: ``<service>.<namespace>.svc.<cluster domain>``.
        coordinator_env: value of ``TRAINPLANE_COORDINATOR`` in pods; ``None`` when the training
            operator's ``MASTER_ADDR`` names node 0 (PyTorchJob with a Master).
        coordinator_fqdn: node 0's fully qualified host name.
        coordinator_url: the coordinator agent's base URL, ``http://<coordinator_fqdn>:<agent port>``.
    """

    job: str
    namespace: str
    service: str
    token_secret: str
    runtime_configmap: str
    size_configmap: str
    service_fqdn: str
    coordinator_env: Optional[str]
    coordinator_fqdn: str
    coordinator_url: str


def resource_name(name: str, namespace: str) -> str:
    """The job's Pulumi resource name, which its children's names start with: ``name`` in the
    ``default`` namespace, ``<namespace>/<name>`` elsewhere (kubectl's spelling).

    Pulumi tells resources apart by URN (type, parent and name), so two jobs of one name in two
    namespaces must not share a resource name; job names cannot contain ``/``, so no two jobs map to one.
    """
    return name if namespace == DEFAULT_NAMESPACE else f"{namespace}/{name}"


def pytorch_replica_host(job: str, replica_type: str, index: Union[int, str]) -> str:
    """The pod and Service name the training operator gives replica ``index`` (or ``"{index}"``, a
    template) of ``replica_type``."""
    return f"{job}-{replica_type.lower()}-{index}"


def job_names(name: str, args: DistributedJobArgs) -> JobNames:
    """Derive every name of job ``name``; the name must already be validated.

    Node 0 is ``<name>-0.<service>`` for Indexed Jobs and StatefulSets (the pod host name under the
    headless Service), and the operator's per-replica Service for a PyTorchJob: ``<name>-master-0``,
    or ``<name>-worker-0`` for an elastic (Worker-only) one.
    """
    svc_suffix = f"{args.namespace}.svc.{args.cluster_domain}"
    coordinator_env: Optional[str]
    if args.workload_backend == PYTORCHJOB:
        role = PYTORCH_WORKER if args.elastic else PYTORCH_MASTER
        host = pytorch_replica_host(name, role, 0)
        coordinator_env = host if args.elastic else None
        coordinator_fqdn = f"{host}.{svc_suffix}"
    else:
        coordinator_env = f"{name}-0.{name}"
        coordinator_fqdn = f"{coordinator_env}.{svc_suffix}"
    return JobNames(
        job=name,
        namespace=args.namespace,
        service=name,
        token_secret=f"{name}-token",
        runtime_configmap=f"{name}-runtime",
        size_configmap=f"{name}-size",
        service_fqdn=f"{name}.{svc_suffix}",
        coordinator_env=coordinator_env,
        coordinator_fqdn=coordinator_fqdn,
        coordinator_url=f"http://{coordinator_fqdn}:{args.agent_port}",
    )
