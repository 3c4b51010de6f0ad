"""Render a whole job as plain Kubernetes manifests, in creation order, with no Pulumi involved."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from components.addons.kueue import LOCAL_QUEUE_REPLACED_ON
from components.capabilities import KUEUE
from components.job.args import DistributedJobArgs
from components.job.backends import STATEFULSET, TRAINJOB
from components.job.bundle import RuntimeBundle, configmap_manifest
from components.job.gang import local_queue_manifest, placement, podgroup_manifest
from components.job.naming import JobNames, job_names, validate_job_name
from components.job.network import disruption_budget, headless_service, network_policy
from components.job.platform import platform_manifests
from components.job.pod import TOKEN_KEY, common_labels, size_settings
from components.job.trainjob import train_job
from components.job.volumes import retained
from components.job.workloads import workload_manifest
from components.outputs import Labels

BUILTIN_API_VERSIONS = frozenset({"v1", "apps/v1", "batch/v1", "networking.k8s.io/v1", "policy/v1"})
"""API versions every cluster serves; anything else is a custom resource."""
JOB_IMMUTABLE = tuple(f"spec.{f}" for f in ("selector", "completions", "completionMode", "podFailurePolicy",
                                              "backoffLimitPerIndex", "managedBy", "successPolicy", "template"))
"""The Job fields the API server refuses to change (k8s.io/kubernetes v1.34.4
``pkg/apis/batch/validation/validation.go``, ``validateJobSpecUpdate``: selector, completionMode,
podFailurePolicy, backoffLimitPerIndex, managedBy, successPolicy and the pod template immutable;
completions only with parallelism in an elastic Indexed Job, which trainplane does not patch). The rest
(``ttlSecondsAfterFinished``, ``activeDeadlineSeconds``, ``backoffLimit``, ``suspend``) is patched: a
replacement would kill a running job for a change the server accepts in place."""
REPLACED_ON = {"Job": JOB_IMMUTABLE, "PyTorchJob": ("spec",), "LocalQueue": LOCAL_QUEUE_REPLACED_ON,
               "TrainJob": ("*",)}
"""Property paths whose change replaces the object instead of patching it: a Job's immutable fields
(above), trainplane's PyTorchJob's whole spec (the operator does not roll a changed template), a
LocalQueue's ``spec.clusterQueue``, and every field of a TrainJob (each of ``runtimeRef``, ``trainer``,
``activeDeadlineSeconds``, ``managedBy`` and each runtime patch's ``manager`` has the CRD rule
``self == oldSelf``, kubeflow/trainer v2.3.0 ``manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml``;
``runtimePatches`` change only while it is suspended): ``"*"``, any property."""
KUEUE_STATEFULSET_REPLACED_ON = ("spec",)
"""A StatefulSet managed by Kueue keeps ``replicas`` and its pods' shape (requests, ports, node
selector, tolerations) while managed: Kueue's StatefulSet webhook refuses changing them
(kubernetes-sigs/kueue v0.19.2 ``pkg/controller/jobs/statefulset/statefulset_webhook.go``,
``ValidateUpdate``), so a change replaces it and Kueue admits the new one."""


@dataclass(frozen=True)
class Manifest:
    """One object of a job.

    Attributes:
        role: the child's role; the Pulumi resource is named ``<job>-<role>``.
        body: the Kubernetes object (``apiVersion``, ``kind``, ``metadata``, ...). May hold Pulumi
            Outputs where the caller passed them (the token).
        custom: a custom resource, whose CRD an add-on installs.
        replace_on: property paths whose change replaces the object (deleting it first: its name is
            fixed) instead of patching it; empty when every change is patched.
        after_previous: created only once every earlier object exists (the workload: its pods need
            the Secret, the bundle and their PodGroup or queue from the start).
        retain: left in the cluster when Pulumi deletes it (``retainOnDelete``): a claim the job creates
            with ``claim_retention="Retain"``.
    """

    role: str
    body: dict[str, Any]
    custom: bool = False
    replace_on: tuple[str, ...] = ()
    after_previous: bool = False
    retain: bool = False


@dataclass(frozen=True)
class RenderedJob:
    """Every object of a job, in creation order, and its names."""

    names: JobNames
    manifests: tuple[Manifest, ...]


def token_secret(names: JobNames, labels: Labels, token: Any) -> dict[str, Any]:
    """The Secret holding the job token (a string, or a Pulumi Output of one)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": names.token_secret, "namespace": names.namespace, "labels": labels},
        "type": "Opaque",
        "stringData": {TOKEN_KEY: token},
    }


def size_configmap(names: JobNames, args: DistributedJobArgs, labels: Labels) -> Optional[dict[str, Any]]:
    """An elastic service job's size settings, which its StatefulSet's pods read (else ``None``)."""
    if not (args.elastic and args.workload_backend == STATEFULSET):
        return None
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": names.size_configmap, "namespace": names.namespace, "labels": labels},
        "data": size_settings(args),
    }


def replaced_on(body: dict[str, Any], args: DistributedJobArgs) -> tuple[str, ...]:
    """The property paths of ``body`` whose change replaces it (see :data:`REPLACED_ON`)."""
    if body["kind"] == "StatefulSet" and args.gang_scheduler == KUEUE:
        return KUEUE_STATEFULSET_REPLACED_ON
    return REPLACED_ON.get(body["kind"], ())


def render_job(name: str, args: DistributedJobArgs, token: Any, bundle: RuntimeBundle) -> RenderedJob:
    """Render job ``name``: token Secret, runtime ConfigMap, (elastic service jobs) size ConfigMap,
    headless Service, the claims, ServiceAccount and env Secret the platform fields ask for, queue or
    PodGroup, the workload, NetworkPolicy and (service mode) PodDisruptionBudget.

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
    build = train_job if args.workload_backend == TRAINJOB else workload_manifest
    workload = build(names, args, common_labels(names, args, "workload"), bundle, gang)
    candidates: list[tuple[str, Optional[dict[str, Any]]]] = [
        ("token", token_secret(names, common_labels(names, args, "token"), token)),
        ("runtime", configmap_manifest(names.runtime_configmap, names.namespace,
                                       common_labels(names, args, "runtime"), bundle)),
        ("size", size_configmap(names, args, common_labels(names, args, "size"))),
        ("service", None if args.workload_backend == TRAINJOB  # JobSet makes it
         else headless_service(names, args, common_labels(names, args, "service"))),
        *platform_manifests(names, args, common_labels(names, args, "storage")),
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
            replace_on=replaced_on(body, args),
            after_previous=role == args.workload_backend,
            retain=retained(body, args.claim_retention),
        )
        for role, body in candidates
        if body is not None
    )
    return RenderedJob(names=names, manifests=manifests)
