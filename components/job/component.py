"""``DistributedJob``: the Pulumi ComponentResource that deploys one training job.

The class is thin: :func:`~components.job.render.render_job` decides every object, this module only
turns the manifests into Pulumi resources under one parent.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random

from components.capabilities import ClusterCapabilities
from components.job.args import DistributedJobArgs, validate_job_name
from components.job.bundle import build_bundle
from components.job.fit import check_fits
from components.job.naming import resource_name
from components.job.render import Manifest, render_job

RESOURCE_TYPE = "trainplane:job:DistributedJob"
TOKEN_LENGTH = 48
"""Characters of the job token: alphanumeric, about 285 bits."""

RESOURCE_CLASSES: dict[tuple[str, str], Callable[..., pulumi.CustomResource]] = {
    ("v1", "Secret"): k8s.core.v1.Secret,
    ("v1", "ConfigMap"): k8s.core.v1.ConfigMap,
    ("v1", "Service"): k8s.core.v1.Service,
    ("batch/v1", "Job"): k8s.batch.v1.Job,
    ("apps/v1", "StatefulSet"): k8s.apps.v1.StatefulSet,
    ("networking.k8s.io/v1", "NetworkPolicy"): k8s.networking.v1.NetworkPolicy,
    ("policy/v1", "PodDisruptionBudget"): k8s.policy.v1.PodDisruptionBudget,
}
TOP_LEVEL_ARGS = {"metadata": "metadata", "spec": "spec", "data": "data", "stringData": "string_data",
                  "type": "type"}


class DistributedJob(pulumi.ComponentResource):
    """One distributed training job: token Secret, runtime ConfigMap, headless Service, workload,
    gang-scheduling objects, NetworkPolicy and (service mode) PodDisruptionBudget.

    The component and its children are named after :func:`~components.job.naming.resource_name`: the
    job name in the ``default`` namespace, ``<namespace>/<name>`` elsewhere, so jobs of one name in two
    namespaces have distinct URNs.

    Attributes:
        job_name: the job's Kubernetes name.
        namespace: its namespace.
        service_fqdn: the headless Service's fully qualified DNS name.
        coordinator_url: base URL of node 0's agent (``http://<host>:<agent port>``).
        token: the job token (a Pulumi secret); clients send it as ``Authorization: Bearer``. A
            ``RandomPassword`` without keepers: it stays the same across updates of the job.
        resources: the Kubernetes children by role (``token``, ``runtime``, ``service``, the
            backend, ``podgroup``, ``localqueue``, ``network-policy``, ``pdb``).
    """

    job_name: pulumi.Output[str]
    namespace: pulumi.Output[str]
    service_fqdn: pulumi.Output[str]
    coordinator_url: pulumi.Output[str]
    token: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        args: DistributedJobArgs,
        opts: Optional[pulumi.ResourceOptions] = None,
        crd_dependencies: Sequence[pulumi.Resource] = (),
        cluster: Optional[ClusterCapabilities] = None,
    ) -> None:
        """Create the job.

        Args:
            name: the job name, also its Kubernetes name: a plain ``str``, a DNS-1035 label short
                enough for the names derived from it (see :func:`~components.job.args.validate_job_name`).
            args: what to run and how (plain values, validated on construction).
            opts: Pulumi options; pass ``provider=`` a ``kubernetes.Provider`` to target a cluster
                other than the ambient one. Children inherit it.
            crd_dependencies: resources the custom resources (PyTorchJob, PodGroup, LocalQueue)
                depend on, typically the add-ons that install their CRDs.
            cluster: what the target cluster provides; when given, a job it cannot run is refused
                before anything is registered (``components.job.fit``).

        Raises:
            InvalidJobArgs: the name is not a plain str, is invalid, or is too long for ``args``
                (the message names the derived name that would overflow); or ``cluster`` cannot run
                the job (the message names the field, the value and the fix).
            BundleError: the agent's sources cannot be read or exceed the ConfigMap limit.
            OperatorRuleError: a rendered PyTorchJob would break a training-operator rule.
        """
        validate_job_name(name, args)
        if cluster is not None:
            check_fits(args, cluster)
        bundle = build_bundle()
        prefix = resource_name(name, args.namespace)
        super().__init__(RESOURCE_TYPE, prefix, None, opts)
        password = random.RandomPassword(
            f"{prefix}-token-value", length=TOKEN_LENGTH, special=False,
            opts=pulumi.ResourceOptions(parent=self),
        )
        rendered = render_job(name, args, password.result, bundle)
        self.resources: dict[str, pulumi.CustomResource] = {}
        for manifest in rendered.manifests:
            self.resources[manifest.role] = self._create(prefix, manifest, crd_dependencies)
        names = rendered.names
        self.job_name = pulumi.Output.from_input(names.job)
        self.namespace = pulumi.Output.from_input(names.namespace)
        self.service_fqdn = pulumi.Output.from_input(names.service_fqdn)
        self.coordinator_url = pulumi.Output.from_input(names.coordinator_url)
        self.token = pulumi.Output.secret(password.result)
        self.register_outputs({
            "job_name": self.job_name,
            "namespace": self.namespace,
            "service_fqdn": self.service_fqdn,
            "coordinator_url": self.coordinator_url,
            "token": self.token,
        })

    def _create(
        self, prefix: str, manifest: Manifest, crd_dependencies: Sequence[pulumi.Resource]
    ) -> pulumi.CustomResource:
        body = manifest.body
        depends_on = list(crd_dependencies) if manifest.custom else []
        if manifest.after_previous:
            depends_on += self.resources.values()
        opts = pulumi.ResourceOptions(
            parent=self,
            depends_on=depends_on,
            delete_before_replace=bool(manifest.replace_on) or None,
            replace_on_changes=list(manifest.replace_on) or None,
        )
        resource_name = f"{prefix}-{manifest.role}"
        kwargs: dict[str, Any] = {arg: body[key] for key, arg in TOP_LEVEL_ARGS.items() if key in body}
        if manifest.custom:
            return k8s.apiextensions.CustomResource(
                resource_name, api_version=body["apiVersion"], kind=body["kind"], opts=opts, **kwargs
            )
        return RESOURCE_CLASSES[(body["apiVersion"], body["kind"])](resource_name, opts=opts, **kwargs)
