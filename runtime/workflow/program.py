"""The inline Pulumi program of a ``KubernetesCompute``: one service-mode ``DistributedJob`` and its outputs.

The program is what ``pulumi up`` runs for the job's stack: a Kubernetes provider for the chosen
kubeconfig and context, the job (``components.DistributedJob`` as any Pulumi program uses it), and
the outputs the driver reads back: the token (a secret), where node 0's agent listens, and the
digest of everything the program was made from (:func:`spec_digest`), by which a later driver run
recognises a stack it can reattach to without an update.

Imports Pulumi and the components; ``runtime.workflow`` imports this module only when a
``KubernetesCompute`` deploys.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, fields
from typing import Any, Mapping, Optional

import pulumi
import pulumi_kubernetes as k8s

from components.job import DistributedJob, DistributedJobArgs
from components.job.bundle import build_bundle

PROGRAM_VERSION = 1
"""Bumped whenever the program's resources change shape, so older stacks get an update."""
TOKEN = "token"  # noqa: S105 - an output's name, not a secret
NAMESPACE = "namespace"
COORDINATOR_POD = "coordinator_pod"
AGENT_PORT = "agent_port"
COORDINATOR_URL = "coordinator_url"
SPEC = "spec"
OUTPUTS = (TOKEN, NAMESPACE, COORDINATOR_POD, AGENT_PORT, COORDINATOR_URL, SPEC)
"""Every output the program exports."""


@dataclass(frozen=True)
class ClusterAccess:
    """How the program and the port-forward reach the cluster.

    Attributes:
        kubeconfig: path of a kubeconfig file; ``None`` for ``$KUBECONFIG`` or ``~/.kube/config``.
        context: the kubeconfig context; ``None`` for its current context.
    """

    kubeconfig: Optional[str] = None
    context: Optional[str] = None


def coordinator_pod(name: str) -> str:
    """Node 0's pod of service job ``name`` (a StatefulSet's ordinal 0)."""
    return f"{name}-0"


def spec_digest(name: str, args: DistributedJobArgs, cluster: ClusterAccess) -> str:
    """SHA-256 (hex) of everything the program renders from: name, arguments, cluster, the agent's sources.

    Equal digests mean an ``up`` would change nothing the program controls.
    """
    spec = {"version": PROGRAM_VERSION, "name": name, "cluster": [cluster.kubeconfig, cluster.context],
            "args": {f.name: _plain(getattr(args, f.name)) for f in fields(args)}, "bundle": build_bundle().digest}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


def job_program(name: str, args: DistributedJobArgs, cluster: ClusterAccess) -> Any:
    """The inline program deploying job ``name`` with ``args`` (service mode) to ``cluster``.

    Args:
        name: the job's name (also its stack's).
        args: the job's arguments; ``mode`` must be ``service``.
        cluster: the kubeconfig and context.

    Returns:
        A callable for ``pulumi.automation``: it creates a ``kubernetes.Provider`` and the
        ``DistributedJob`` under it, and exports :data:`OUTPUTS`.

    Raises:
        ValueError: ``args`` is not a service-mode job.
    """
    if args.mode != "service":
        raise ValueError(f"mode={args.mode!r}: a KubernetesCompute deploys a service-mode job")
    digest = spec_digest(name, args, cluster)

    def program() -> None:
        provider = k8s.Provider(f"{name}-cluster", kubeconfig=cluster.kubeconfig, context=cluster.context)
        job = DistributedJob(name, args, opts=pulumi.ResourceOptions(provider=provider))
        pulumi.export(TOKEN, job.token)
        pulumi.export(NAMESPACE, job.namespace)
        pulumi.export(COORDINATOR_POD, coordinator_pod(name))
        pulumi.export(AGENT_PORT, args.agent_port)
        pulumi.export(COORDINATOR_URL, job.coordinator_url)
        pulumi.export(SPEC, digest)

    return program


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
