"""Names derived from a job's name: objects, DNS names of node 0, and the outputs built from them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

import pulumi

from components import validate
from components.errors import InvalidJobArgs
from components.job import checks
from components.job.backends import PYTORCHJOB, STATEFULSET, STATEFULSET_HASH_SUFFIX, TRAINJOB
from components.outputs import lift

if TYPE_CHECKING:
    from components.job.args import DistributedJobArgs

PYTORCH_MASTER = "Master"
PYTORCH_WORKER = "Worker"
DEFAULT_NAMESPACE = "default"
TRAINER_NODE = "node"
"""The Trainer's replicated job of nodes (kubeflow/trainer v2.3.0 ``constants.Node``)."""
JOBSET_POD_SUFFIX = 6
"""JobSet checks ``<pod host>-abcde`` (the Job controller's random suffix) is a 63-character label
(kubernetes-sigs/jobset v0.12.0 ``pkg/webhooks/jobset_webhook.go``, ``longestPodName``)."""


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
        coordinator_url: the coordinator agent's base URL, ``http://<node 0's fully qualified host name>:<agent
            port>``.
        peers: value of ``TRAINPLANE_PEERS``, every node's host with ``{index}`` for the node rank, or ``None``
            (a fixed-size PyTorchJob, whose Master the operator names).

    The namespace and the names built from it are Outputs when the namespace is one.
    """

    job: str
    namespace: pulumi.Input[str]
    service: str
    token_secret: str
    runtime_configmap: str
    size_configmap: str
    service_fqdn: pulumi.Input[str]
    coordinator_env: Optional[str]
    coordinator_url: pulumi.Input[str]
    peers: Optional[str] = None


def resource_name(name: str, namespace: pulumi.Input[str]) -> str:
    """The job's Pulumi resource name, which its children's names start with: ``name`` in the
    ``default`` namespace, ``<namespace>/<name>`` elsewhere (kubectl's spelling).

    Pulumi tells resources apart by URN (type, parent and name), so two jobs of one name in two
    namespaces must not share a resource name; job names cannot contain ``/``, so no two jobs map to one.
    A namespace that is an Output gives ``name``: Pulumi names a resource when it is created, before
    Outputs resolve. Aliases (:func:`former_names`) tie the two names together.
    """
    if isinstance(namespace, pulumi.Output) or namespace == DEFAULT_NAMESPACE:
        return name
    return f"{namespace}/{name}"


def former_names(name: str, namespace: pulumi.Input[str], types: Sequence[str],
                 parent: Optional[pulumi.Resource] = None) -> list[pulumi.Input[Union[str, pulumi.Alias]]]:
    """Aliases from the name the job's component has under the other kind of namespace, so that turning a
    plain namespace into an Output (``namespace=team.metadata.name``), or back, is no replacement.

    :func:`resource_name` gives ``<namespace>/<name>`` for a plain namespace outside ``default``, ``name``
    for an Output: the component of a job whose namespace is an Output is aliased to
    ``<its value>/<name>`` (a URN known once the Output is), one with a plain namespace to ``name``. The
    engine matches the first alias that names a resource in the stack's state, and gives each child the
    alias of its parent with its own name's prefix replaced (pulumi/pulumi
    ``pkg/resource/deploy/step_generator.go``, ``generateAliases`` and ``inheritedChildAlias``, at
    1a16857a), so the children, named ``<component name>-<role>``, keep their state too.

    Args:
        name: the job's name.
        namespace: its namespace, plain or an Output.
        types: the component's type tokens, current and former (an alias per name and type).
        parent: the component's parent (``None``: the stack).
    """
    if isinstance(namespace, pulumi.Output):
        old = pulumi.Output.concat(namespace, "/", name)
        return [pulumi.create_urn(old, type_, parent) for type_ in types]
    if namespace == DEFAULT_NAMESPACE:
        return []
    return [pulumi.Alias(name=name, type_=type_) for type_ in types]


def pytorch_replica_host(job: str, replica_type: str, index: Union[int, str]) -> str:
    """The pod and Service name the training operator gives replica ``index`` (or ``"{index}"``, a
    template) of ``replica_type``."""
    return f"{job}-{replica_type.lower()}-{index}"


def jobset_pod_host(job: str, index: Union[int, str]) -> str:
    """The host name of node ``index`` (or ``"{index}"``) of a TrainJob ``job``: JobSet names the Trainer's Job
    ``<jobset>-node-0`` (kubernetes-sigs/jobset v0.12.0 ``pkg/util/placement/placement.go``, ``GenJobName``;
    the JobSet is named after the TrainJob) and the Job controller its pods' host names ``<job>-<index>``."""
    return f"{job}-{TRAINER_NODE}-0-{index}"


def job_names(name: str, args: DistributedJobArgs) -> JobNames:
    """Derive every name of job ``name``; the name must already be validated.

    Node 0 is ``<name>-0.<service>`` for Indexed Jobs and StatefulSets (the pod host name under the
    headless Service), and the operator's per-replica Service for a PyTorchJob: ``<name>-master-0``,
    or ``<name>-worker-0`` for an elastic (Worker-only) one.
    """
    coordinator_env: Optional[str]
    peers: Optional[str]
    if args.workload_backend == PYTORCHJOB:
        role = PYTORCH_WORKER if args.elastic else PYTORCH_MASTER
        host = pytorch_replica_host(name, role, 0)
        coordinator_env = host if args.elastic else None
        peers = pytorch_replica_host(name, PYTORCH_WORKER, "{index}") if args.elastic else None
    elif args.workload_backend == TRAINJOB:  # JobSet's headless Service is named after the JobSet (subdomain)
        host = f"{jobset_pod_host(name, 0)}.{name}"
        coordinator_env = host
        peers = f"{jobset_pod_host(name, '{index}')}.{name}"
    else:
        host = f"{name}-0.{name}"
        coordinator_env = host
        peers = f"{name}-{{index}}.{name}"

    def in_namespace(prefix: str) -> Any:
        return lift(lambda namespace: f"{prefix}.{namespace}.svc.{args.cluster_domain}", args.namespace)

    coordinator_fqdn = in_namespace(host)
    return JobNames(
        job=name,
        namespace=args.namespace,
        service=name,
        token_secret=f"{name}-token",
        runtime_configmap=f"{name}-runtime",
        size_configmap=f"{name}-size",
        service_fqdn=in_namespace(name),
        coordinator_env=coordinator_env,
        coordinator_url=lift(lambda fqdn: f"http://{fqdn}:{args.agent_port}", coordinator_fqdn),
        peers=peers,
    )


def validate_job_name(name: str, args: DistributedJobArgs) -> None:
    """Check the job name: a plain RFC 1035 label short enough for every name derived from it.

    Derived names: Indexed Job pod host names ``<name>-<index>`` (63 characters), StatefulSet
    revision-hash labels ``<name>-<hash>`` (the name at most 52), PyTorchJob pods and Services
    ``<name>-worker-<index>`` and ``<name>-master-0`` (63, the operator's DNS-1035 rule), TrainJob pods
    ``<name>-node-0-<index>-<5 random characters>`` (63, JobSet's rule).

    Raises:
        InvalidJobArgs: the name is not a plain str, breaks the rule, or is too long for ``args``;
            the message names the derived name that would overflow.
    """
    checks.require_plain("name", name, "str")
    checks.require_dns1035("name", name, max_length=None)
    derived = longest_derived_name(name, args)
    if derived.length > validate.MAX_LABEL:
        raise InvalidJobArgs("name", name, f"the {derived.kind} {derived.text!r} would be {derived.length} "
                             f"characters; Kubernetes allows {validate.MAX_LABEL}",
                             f"shorten name to at most {max_name_length(args)} characters")


@dataclass(frozen=True)
class DerivedName:
    """The longest name Kubernetes derives from a job name, which must stay a 63-character label.

    Attributes:
        kind: what it names, e.g. ``"pod host name"``.
        text: the name, with ``<hash>`` standing for a part Kubernetes generates.
        length: its length in characters, generated parts at their longest.
    """

    kind: str
    text: str
    length: int


def longest_derived_name(name: str, args: DistributedJobArgs) -> DerivedName:
    """The longest label-limited name derived from job ``name`` for ``args``' backend."""
    backend = args.workload_backend
    if backend == STATEFULSET:
        return DerivedName("StatefulSet controller-revision-hash label", f"{name}-<hash>",
                           len(name) + STATEFULSET_HASH_SUFFIX)
    if backend == PYTORCHJOB:
        top = args.max_nodes - 1 if args.elastic else max(args.workers - 2, 0)
        text = f"{name}-worker-{top}"
        return DerivedName("PyTorchJob pod and Service name", text, len(text))
    if backend == TRAINJOB:
        host = jobset_pod_host(name, args.max_nodes - 1)
        return DerivedName("JobSet pod name", f"{host}-<random>", len(host) + JOBSET_POD_SUFFIX)
    text = f"{name}-{args.max_nodes - 1}"
    return DerivedName("pod host name", text, len(text))


def max_name_length(args: DistributedJobArgs) -> int:
    """The longest job name whose derived names still fit, characters."""
    return validate.MAX_LABEL - longest_derived_name("", args).length
