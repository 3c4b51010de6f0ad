"""``DistributedJob``: the Pulumi ComponentResource that deploys one training job.

The class is thin: :func:`~components.job.render.render_job` decides every object, this module only
turns the manifests into Pulumi resources under one parent.

No ``from __future__ import annotations`` here: the ``trainplane`` package's schema is inferred from this
class's annotations at run time (``components.package``).
"""

import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random

from components.capabilities import ClusterCapabilities
from components.job.args import INPUT_FIELDS, DistributedJobArgs
from components.job.bundle import build_bundle
from components.job.fit import check_fits
from components.job.inputs import DistributedJobArgsDict
from components.job.naming import former_names, resource_name, validate_job_name
from components.job.platform import pending_check, pod_identity_association
from components.job.render import Manifest, render_job
from components.tokens import aliased, token

RESOURCE_TYPE = token("DistributedJob")
"""The component's type token (``components.tokens``)."""
FORMER_RESOURCE_TYPE = "trainplane:job:DistributedJob"
"""The type token before the component was packaged; an alias keeps stacks made with it from replacing
their jobs."""
TOKEN_LENGTH = 48
"""Characters of the job token: alphanumeric, about 285 bits."""

RESOURCE_CLASSES: dict[tuple[str, str], Callable[..., pulumi.CustomResource]] = {
    ("v1", "Secret"): k8s.core.v1.Secret,
    ("v1", "ConfigMap"): k8s.core.v1.ConfigMap,
    ("v1", "Service"): k8s.core.v1.Service,
    ("v1", "PersistentVolumeClaim"): k8s.core.v1.PersistentVolumeClaim,
    ("v1", "ServiceAccount"): k8s.core.v1.ServiceAccount,
    ("batch/v1", "Job"): k8s.batch.v1.Job,
    ("apps/v1", "StatefulSet"): k8s.apps.v1.StatefulSet,
    ("networking.k8s.io/v1", "NetworkPolicy"): k8s.networking.v1.NetworkPolicy,
    ("policy/v1", "PodDisruptionBudget"): k8s.policy.v1.PodDisruptionBudget,
}
TOP_LEVEL_ARGS = {"metadata": "metadata", "spec": "spec", "data": "data", "stringData": "string_data",
                  "type": "type", "automountServiceAccountToken": "automount_service_account_token"}

if TYPE_CHECKING:
    JobArgs = Union[DistributedJobArgs, DistributedJobArgsDict]
else:
    JobArgs = DistributedJobArgsDict
    """At run time the annotation is the TypedDict alone: the package schema is inferred from it. Python
    callers may pass either, as type checkers see."""


class DistributedJob(pulumi.ComponentResource):
    """One distributed training job: token Secret, runtime ConfigMap, headless Service, workload (Indexed
    Job, PyTorchJob, StatefulSet, or a Kubeflow Trainer v2 TrainJob, whose JobSet makes the Service and
    whose runtime the PodGroup), gang-scheduling objects, NetworkPolicy and (service mode)
    PodDisruptionBudget, with one agent per pod.

    The component and its children are named after the job name in the ``default`` namespace,
    ``<namespace>/<name>`` elsewhere, so jobs of one name in two namespaces have distinct URNs (see the
    ``namespace`` argument for a namespace that is an Output); aliases between the two names keep a
    job's objects when its namespace changes from a string to an Output of the same value, or back.
    """

    job_name: pulumi.Output[str]
    """The job's Kubernetes name (also the headless Service's)."""
    namespace: pulumi.Output[str]
    """The namespace of every object of the job."""
    service_fqdn: pulumi.Output[str]
    """The headless Service's fully qualified DNS name."""
    coordinator_url: pulumi.Output[str]
    """Base URL of node 0's agent (``http://<host>:<agent port>``), for clients inside the cluster."""
    token: pulumi.Output[str]
    """The job token (a secret); clients send it as ``Authorization: Bearer``. A random password without
    keepers: it stays the same across updates of the job."""

    def __init__(
        self,
        name: str,
        args: JobArgs,
        opts: Optional[pulumi.ResourceOptions] = None,
        *,
        crd_dependencies: Sequence[pulumi.Resource] = (),
        cluster: Optional[ClusterCapabilities] = None,
    ) -> None:
        """Create the job.

        Args:
            name: the job name, also its Kubernetes name: a plain ``str``, a DNS-1035 label short
                enough for the names derived from it (see :func:`~components.job.naming.validate_job_name`).
            args: what to run and how: a :class:`~components.job.args.DistributedJobArgs`, or a mapping
                of its fields (a :class:`~components.job.inputs.DistributedJobArgsDict`, as a Pulumi
                program in another language passes them).
            opts: Pulumi options; pass ``provider=`` a ``kubernetes.Provider`` to target a cluster
                other than the ambient one. Children inherit it. The custom resources (PyTorchJob,
                PodGroup, LocalQueue) also wait for the resources in ``depends_on``.
            crd_dependencies: resources the custom resources depend on, typically the add-ons that
                install their CRDs.
            cluster: what the target cluster provides; when given, a job it cannot run is refused
                before anything is registered (``components.job.fit``).

        The job's resources wait until every argument that is an Output has been checked (and, with
        ``cluster``, the queue checks that read one): an invalid value fails the update, naming the field,
        before any of them is registered. A value still unknown at preview is not checked then.

        Raises:
            InvalidJobArgs: an argument is invalid; the name is not a plain str, is invalid, or is too
                long for ``args`` (the message names the derived name that would overflow); or
                ``cluster`` cannot run the job (the message names the field, the value and the fix).
            BundleError: the agent's sources cannot be read or exceed the ConfigMap limit.
            OperatorRuleError: a rendered PyTorchJob would break a training-operator rule.
        """
        job_args = args if isinstance(args, DistributedJobArgs) else DistributedJobArgs.from_inputs(args)
        validate_job_name(name, job_args)
        checks = [getattr(job_args, f) for f in sorted(INPUT_FIELDS) if isinstance(getattr(job_args, f), pulumi.Output)]
        fit = check_fits(job_args, cluster) if cluster is not None else None
        if fit is not None:
            checks.append(fit)
        storage = pending_check(job_args)
        if storage is not None:
            checks.append(storage)
        bundle = build_bundle()
        prefix = resource_name(name, job_args.namespace)
        former = former_names(name, job_args.namespace, (RESOURCE_TYPE, FORMER_RESOURCE_TYPE),
                              opts.parent if opts else None)
        super().__init__(RESOURCE_TYPE, prefix, None, aliased(opts, FORMER_RESOURCE_TYPE, former))
        checked: list[Any] = [pulumi.Output.all(*checks).apply(lambda _: None)] if checks else []
        self._checked = checked
        self._custom_dependencies = pulumi.ResourceOptions.merge(
            pulumi.ResourceOptions(depends_on=list(crd_dependencies)),
            pulumi.ResourceOptions(depends_on=opts.depends_on if opts else None))
        password = random.RandomPassword(
            f"{prefix}-token-value", length=TOKEN_LENGTH, special=False,
            opts=pulumi.ResourceOptions(parent=self, depends_on=checked or None),
        )
        rendered = render_job(name, job_args, password.result, bundle)
        self.resources: dict[str, pulumi.CustomResource] = {}
        for manifest in rendered.manifests:
            self.resources[manifest.role] = self._create(prefix, manifest)
        names = rendered.names
        identity = pod_identity_association(
            f"{prefix}-pod-identity", names, job_args,
            pulumi.ResourceOptions(parent=self, depends_on=[self.resources["service-account"]]
                                   if "service-account" in self.resources else None))
        if identity is not None:
            self.resources["pod-identity"] = identity
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

    def _create(self, prefix: str, manifest: Manifest) -> pulumi.CustomResource:
        body = manifest.body
        depends_on: list[Any] = [*self._checked]
        if manifest.after_previous:
            depends_on += self.resources.values()
        opts = pulumi.ResourceOptions(
            parent=self,
            depends_on=depends_on,
            delete_before_replace=bool(manifest.replace_on) or None,
            replace_on_changes=list(manifest.replace_on) or None,
            retain_on_delete=manifest.retain or None,
        )
        if manifest.custom:
            opts = pulumi.ResourceOptions.merge(opts, self._custom_dependencies)
        resource_name = f"{prefix}-{manifest.role}"
        kwargs: dict[str, Any] = {arg: body[key] for key, arg in TOP_LEVEL_ARGS.items() if key in body}
        if body["kind"] == "Secret":  # a value given plain is a secret in Pulumi's state too
            kwargs["string_data"] = pulumi.Output.secret(kwargs["string_data"])
        if manifest.custom:
            return k8s.apiextensions.CustomResource(
                resource_name, api_version=body["apiVersion"], kind=body["kind"], opts=opts, **kwargs
            )
        return RESOURCE_CLASSES[(body["apiVersion"], body["kind"])](resource_name, opts=opts, **kwargs)


DistributedJob.__doc__ = inspect.cleandoc(DistributedJob.__doc__ or "")
"""The package schema's description of the component is its docstring: without the source's indentation,
which Markdown would render as code."""
