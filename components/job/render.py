"""Render a whole job as plain Kubernetes manifests, in creation order, with no Pulumi involved."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from components.job.args import DistributedJobArgs, validate_job_name
from components.job.bundle import RuntimeBundle, configmap_manifest
from components.job.gang import local_queue_manifest, placement, podgroup_manifest
from components.job.naming import JobNames, job_names
from components.job.network import disruption_budget, headless_service, network_policy
from components.job.pod import TOKEN_KEY, common_labels
from components.job.workloads import workload_manifest

BUILTIN_API_VERSIONS = frozenset({"v1", "apps/v1", "batch/v1", "networking.k8s.io/v1", "policy/v1"})
"""API versions every cluster serves; anything else is a custom resource."""
IMMUTABLE_KINDS = frozenset({"Job", "PyTorchJob"})
"""Workloads whose pod template cannot change in place: a change replaces them."""


@dataclass(frozen=True)
class Manifest:
    """One object of a job.

    Attributes:
        role: the child's role; the Pulumi resource is named ``<job>-<role>``.
        body: the Kubernetes object (``apiVersion``, ``kind``, ``metadata``, ...). May hold Pulumi
            Outputs where the caller passed them (the token).
        custom: a custom resource, whose CRD an add-on installs.
        replace: a changed object must be replaced (deleted first: its name is fixed), not patched.
        after_previous: created only once every earlier object exists (the workload: its pods need
            the Secret, the bundle and their PodGroup or queue from the start).
    """

    role: str
    body: dict[str, Any]
    custom: bool = False
    replace: bool = False
    after_previous: bool = False


@dataclass(frozen=True)
class RenderedJob:
    """Every object of a job, in creation order, and its names."""

    names: JobNames
    manifests: tuple[Manifest, ...]


def token_secret(names: JobNames, labels: dict[str, str], token: Any) -> dict[str, Any]:
    """The Secret holding the job token (a string, or a Pulumi Output of one)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": names.token_secret, "namespace": names.namespace, "labels": labels},
        "type": "Opaque",
        "stringData": {TOKEN_KEY: token},
    }


def render_job(name: str, args: DistributedJobArgs, token: Any, bundle: RuntimeBundle) -> RenderedJob:
    """Render job ``name``: token Secret, runtime ConfigMap, headless Service, queue or PodGroup,
    the workload, NetworkPolicy and (service mode) PodDisruptionBudget.

    Args:
        name: the job name (DNS-1035, short enough for derived names).
        args: the validated job arguments.
        token: the job token, a string or a Pulumi Output.
        bundle: the agent's sources.

    Raises:
        InvalidJobArgs: the name is invalid or too long.
        OperatorRuleError: a rendered PyTorchJob breaks a training-operator rule.
    """
    validate_job_name(name, args)
    names = job_names(name, args)
    gang = placement(names, args)
    workload = workload_manifest(names, args, common_labels(names, args, "workload"), bundle, gang)
    candidates: list[tuple[str, Optional[dict[str, Any]]]] = [
        ("token", token_secret(names, common_labels(names, args, "token"), token)),
        ("runtime", configmap_manifest(names.runtime_configmap, names.namespace,
                                       common_labels(names, args, "runtime"), bundle)),
        ("service", headless_service(names, args, common_labels(names, args, "service"))),
        ("localqueue", local_queue_manifest(names, args, common_labels(names, args, "queue"))),
        ("podgroup", podgroup_manifest(names, args, common_labels(names, args, "podgroup"))),
        (args.workload_backend, workload),
        ("network-policy", network_policy(names, args, common_labels(names, args, "network-policy"))),
        ("pdb", disruption_budget(names, args, common_labels(names, args, "pdb"))),
    ]
    manifests = tuple(
        Manifest(
            role=role,
            body=body,
            custom=body["apiVersion"] not in BUILTIN_API_VERSIONS,
            replace=body["kind"] in IMMUTABLE_KINDS,
            after_previous=role == args.workload_backend,
        )
        for role, body in candidates
        if body is not None
    )
    return RenderedJob(names=names, manifests=manifests)
