"""``Kueue``: job queueing (Helm, pinned) with ResourceFlavors, ClusterQueues and LocalQueues.

The add-on owns Kueue's manager configuration: which integrations are on (Kueue leaves the kinds of a
disabled one alone) and ``waitForPodsReady``, which makes admission all-or-nothing.

No ``from __future__ import annotations`` here: the ``trainplane`` package's schema is inferred from the
component's annotations at run time (``components.package``).
"""

import copy
import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Union

import pulumi
import yaml

from components import docs, validate
from components.addons.helm import helm_release, local_chart
from components.addons.inputs import KueueArgsDict
from components.addons.objects import custom_resource
from components.addons.provisioning import FEATURE_GATES, install_admission_check, with_admission_check
from components.addons.versions import KUEUE, KUEUE_API
from components.arguments import args_from
from components.errors import ArgumentError
from components.tokens import aliased, token

Quantity = Union[int, str]

PYTORCHJOB_FRAMEWORK = "kubeflow.org/pytorchjob"
CHART_FRAMEWORKS = (
    "batch/job", "kubeflow.org/mpijob", "ray.io/rayjob", "ray.io/rayservice", "ray.io/raycluster",
    "jobset.x-k8s.io/jobset", "workload.codeflare.dev/appwrapper", "trainer.kubeflow.org/trainjob", "pod",
    "deployment", "statefulset", "leaderworkerset.x-k8s.io/leaderworkerset",
)
"""The integrations the pinned chart enables (kubernetes-sigs/kueue v0.19.2 ``charts/kueue/values.yaml``,
``managerConfig.controllerManagerConfigYaml``): ``kubeflow.org/pytorchjob`` is commented out there."""
CHART_MANAGER_CONFIG: dict[str, Any] = {
    "apiVersion": "config.kueue.x-k8s.io/v1beta2",
    "kind": "Configuration",
    "health": {"healthProbeBindAddress": ":8081"},
    "metrics": {"bindAddress": ":8443"},
    "webhook": {"port": 9443},
    "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
    "controller": {"groupKindConcurrency": {
        "Job.batch": 5, "Pod": 5, "Workload.kueue.x-k8s.io": 10, "LocalQueue.kueue.x-k8s.io": 5,
        "ClusterQueue.kueue.x-k8s.io": 5, "ResourceFlavor.kueue.x-k8s.io": 1,
    }},
    "clientConnection": {"qps": 300, "burst": 500},
    "integrations": {"frameworks": list(CHART_FRAMEWORKS)},
}
"""The pinned chart's default manager config (v0.19.2 ``charts/kueue/values.yaml``). The chart takes the
config as one YAML string and uses it whole, so the add-on renders all of it with its own changes."""
KNOWN_FRAMEWORKS = (
    "batch/job", "deployment", "jobset.x-k8s.io/jobset", "kubeflow.org/jaxjob", "kubeflow.org/mpijob",
    "kubeflow.org/paddlejob", PYTORCHJOB_FRAMEWORK, "kubeflow.org/tfjob", "kubeflow.org/xgboostjob",
    "leaderworkerset.x-k8s.io/leaderworkerset", "pod", "ray.io/raycluster", "ray.io/rayjob", "ray.io/rayservice",
    "sparkoperator.k8s.io/sparkapplication", "statefulset", "trainer.kubeflow.org/trainjob",
    "workload.codeflare.dev/appwrapper",
)
"""Every integration the pinned Kueue knows, sorted as it lists them: kubernetes-sigs/kueue v0.19.2 registers one
per package that ``pkg/controller/jobs/jobs.go`` (and ``pkg/controller/jobs/kubeflow/jobs/jobs.go``) links in, each
under its ``FrameworkName`` (``jobframework.RegisterIntegration``). Its config validation
(``pkg/config/validation.go``, ``validateIntegrations``) refuses any other name in ``integrations.frameworks``, and
the manager then does not start, while the chart's webhooks (``failurePolicy: Fail``) stay and refuse the
workloads they cover."""


@dataclass(frozen=True)
class ResourceFlavorArgs:
    """A kind of node capacity (fields documented by ``components.addons.inputs.ResourceFlavor``).

    Raises:
        ArgumentError: The name is not a DNS label, or a node label breaks the label syntax.
    """

    name: str
    """Flavor name (a DNS label)."""
    node_labels: Mapping[str, str] = field(default_factory=dict)
    """Labels that place admitted pods on this flavor's nodes; empty for any node."""

    def __post_init__(self) -> None:
        validate.dns_label("name", self.name)
        validate.labels("node_labels", self.node_labels)


@dataclass(frozen=True)
class ClusterQueueArgs:
    """A cluster-wide pool of quota (fields documented by ``components.addons.inputs.ClusterQueue``).

    Raises:
        ArgumentError: No quota, a quantity that is not a Kubernetes quantity, or flavors
            quoting different resources.
    """

    name: str
    """Queue name (a DNS label)."""
    quotas: Mapping[str, Mapping[str, Quantity]]
    """Per flavor, the nominal quota of each resource, a Kubernetes quantity (a string, or a number), e.g. ``{"default":
    {"cpu": "8", "memory": "32Gi"}}``. Every flavor must quote the same resources: Kueue puts them in one resource
    group."""

    def __post_init__(self) -> None:
        validate.dns_label("name", self.name)
        if not isinstance(self.quotas, Mapping) or not self.quotas:
            raise ArgumentError("quotas", self.quotas, "must be a non-empty mapping of flavors to quotas",
                                'map each flavor to its quotas, e.g. {"default": {"cpu": "8"}}')
        covered = None
        for flavor, resources in self.quotas.items():
            if not isinstance(resources, Mapping) or not resources:
                raise ArgumentError(f'quotas["{flavor}"]', resources,
                                    "must be a non-empty mapping of resource names to quantities",
                                    'map resource names to quantities, e.g. {"cpu": "8"}')
            for resource, quantity in resources.items():
                number = isinstance(quantity, (int, float)) and not isinstance(quantity, bool)
                validate.require(f'quotas["{flavor}"]["{resource}"]', str(quantity) if number else quantity,
                                 validate.quantity)
            if covered is not None and set(resources) != covered:
                raise ArgumentError(f'quotas["{flavor}"]', sorted(resources),
                                    "quotes other resources than the flavors before it (Kueue puts every flavor "
                                    "in one resource group)",
                                    f"quote the same resources as the other flavors: {sorted(covered)}")
            covered = set(resources)


@dataclass(frozen=True)
class LocalQueueArgs:
    """A namespace's door to a ClusterQueue; jobs name it in the ``kueue.x-k8s.io/queue-name`` label
    (fields documented by ``components.addons.inputs.LocalQueue``).

    Raises:
        ArgumentError: A name is not a DNS label.
    """

    name: str
    """Queue name (a DNS label)."""
    namespace: str
    """Namespace the jobs run in."""
    cluster_queue: str
    """The ClusterQueue it feeds."""

    def __post_init__(self) -> None:
        for name in ("name", "namespace", "cluster_queue"):
            validate.dns_label(name, getattr(self, name))


@dataclass(frozen=True)
class KueueArgs:
    """Settings of Kueue (fields documented by ``KueueArgsDict``).

    Raises:
        ArgumentError: Duplicate names or references to flavors or queues that are not defined, a framework
            the pinned Kueue does not know (the message lists those it knows), a bad timeout or limit, or a
            ``chart_path`` that holds no copy of the pinned chart.
    """

    flavors: Sequence[ResourceFlavorArgs] = ()
    """ResourceFlavors."""
    cluster_queues: Sequence[ClusterQueueArgs] = ()
    """ClusterQueues; each may quote only the flavors above."""
    local_queues: Sequence[LocalQueueArgs] = ()
    """LocalQueues; each must feed one of the ClusterQueues above."""
    namespace: str = "kueue-system"
    """Namespace of the release."""
    chart_path: Optional[str] = None
    """A local directory (or ``.tgz``) of the kueue 0.19.2 chart, installed instead of the chart from its OCI registry
    (for a cluster behind a firewall); another chart or version is refused."""
    frameworks: Sequence[str] = CHART_FRAMEWORKS
    """The integrations Kueue manages (its ``integrations.frameworks``); unset, the chart's (``batch/job``,
    ``kubeflow.org/mpijob``, ``ray.io/rayjob``, ...). Add ``kubeflow.org/pytorchjob`` to queue PyTorchJobs (the stack
    does when it installs the training operator)."""
    pods_ready_timeout: int = 600
    """Seconds an admitted workload has for all its pods to become ready before Kueue evicts and requeues it
    (``waitForPodsReady.timeout``)."""
    block_admission: bool = True
    """Admit the next workload only once the previous one's pods are all ready (``waitForPodsReady.blockAdmission``), so
    two half-started jobs never hold each other's nodes."""
    requeue_limit: Optional[int] = 3
    """Evictions for pods that were not ready in time before Kueue deactivates the workload, saying so in its conditions
    (``requeuingStrategy.backoffLimitCount``); ``None`` (from Python) requeues forever."""
    pods_recovery_timeout: int = 0
    """Seconds a running workload that lost a pod has for its replacement to become ready before Kueue evicts and
    requeues the whole workload (``waitForPodsReady.recoveryTimeout``); 0 never does. Kueue's own default, the
    ``pods_ready_timeout``, would stop an elastic job that carries on without the pod and start it again from the
    queue; the agents decide a lost pod's fate themselves (an elastic job goes on, a fixed-size one restarts or fails
    by its quorum timeout)."""
    atomic_scale_up: bool = False
    """Admit a workload requesting GPUs only once the Cluster Autoscaler has scaled up for all its pods at once (a
    ProvisioningRequest of class ``best-effort-atomic-scale-up.autoscaling.x-k8s.io``, made by Kueue's admission
    check on every ClusterQueue; ``components.addons.provisioning``). Needs the ProvisioningRequest CRD before Kueue
    starts and an autoscaler run with ``--enable-provisioning-requests`` (the EKS cluster's ``provisioning_requests``);
    without them the queues stay inactive."""

    def __post_init__(self) -> None:
        validate.dns_label("namespace", self.namespace)
        if self.chart_path is not None:
            local_chart("chart_path", self.chart_path, KUEUE)
        object.__setattr__(self, "frameworks", validate.strings("frameworks", self.frameworks, non_empty=True))
        for i, framework in enumerate(self.frameworks):
            validate.one_of(f"frameworks[{i}]", framework, KNOWN_FRAMEWORKS)
        validate.require("frameworks", list(self.frameworks), validate.LISTED_ONCE)
        validate.integer("pods_ready_timeout", self.pods_ready_timeout, minimum=1)
        validate.integer("pods_recovery_timeout", self.pods_recovery_timeout, minimum=0)
        for flag in ("block_admission", "atomic_scale_up"):
            validate.boolean(flag, getattr(self, flag))
        if self.requeue_limit is not None:
            validate.integer("requeue_limit", self.requeue_limit, minimum=0)
        for name in ("flavors", "cluster_queues", "local_queues"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        validate.require("flavors", [f.name for f in self.flavors], validate.NAMED_ONCE)
        validate.require("cluster_queues", [q.name for q in self.cluster_queues], validate.NAMED_ONCE)
        validate.require("local_queues", [f"{q.namespace}/{q.name}" for q in self.local_queues], validate.NAMED_ONCE)
        flavor = validate.defined("flavor", {f.name for f in self.flavors})
        for i, queue in enumerate(self.cluster_queues):
            for name in queue.quotas:
                validate.require(f"cluster_queues[{i}].quotas", name, flavor)
        cluster_queue = validate.defined("cluster queue", {q.name for q in self.cluster_queues})
        for i, local in enumerate(self.local_queues):
            validate.require(f"local_queues[{i}].cluster_queue", local.cluster_queue, cluster_queue)

    def has_local_queue(self, namespace: str, name: str) -> bool:
        """Whether a LocalQueue ``name`` exists in ``namespace``."""
        return any(q.namespace == namespace and q.name == name for q in self.local_queues)


for _args in (ResourceFlavorArgs, ClusterQueueArgs, LocalQueueArgs, KueueArgs):
    docs.document_fields(_args)

if TYPE_CHECKING:
    KueueInput = Union[KueueArgs, KueueArgsDict]
else:
    KueueInput = KueueArgsDict  # the package schema is inferred from the TypedDict


def manager_config(args: KueueArgs) -> dict[str, Any]:
    """Kueue's manager configuration: the chart's, with the add-on's integrations and ``waitForPodsReady``.

    ``waitForPodsReady`` is what makes Kueue's admission all-or-nothing: an admitted workload whose pods
    are not all ready within the timeout is evicted and requeued (kubernetes-sigs/kueue v0.19.2
    ``apis/config/v1beta2/configuration_types.go``, ``WaitForPodsReady``). v0.19 turns it on by default
    with a 30-minute timeout and no blocking, behind a feature gate due for removal
    (``DisableWaitForPodsReady``, ``pkg/features/kube_features.go``); the add-on sets it explicitly.

    ``recoveryTimeout`` is always rendered: unset, Kueue defaults it to ``timeout`` (``apis/config/v1beta2/
    defaults.go``), and a running workload whose pod failed (``PodsReady`` false with reason
    ``WaitForRecovery``) is evicted whole once it passes (``pkg/controller/core/workload_controller.go``,
    ``admittedNotReadyWorkload``); ``"0s"`` turns the check off (``pkg/controller/core/core.go``,
    ``waitForPodsReady``: only a duration above 0 is kept).

    With ``atomic_scale_up``, ``featureGates`` names ``components.addons.provisioning.FEATURE_GATES``.
    """
    config = copy.deepcopy(CHART_MANAGER_CONFIG)
    config["integrations"] = {"frameworks": list(args.frameworks)}
    strategy: dict[str, Any] = {"timestamp": "Eviction"}
    if args.requeue_limit is not None:
        strategy["backoffLimitCount"] = args.requeue_limit
    config["waitForPodsReady"] = {
        "timeout": f"{args.pods_ready_timeout}s",
        "recoveryTimeout": f"{args.pods_recovery_timeout}s",
        "blockAdmission": args.block_admission,
        "requeuingStrategy": strategy,
    }
    if args.atomic_scale_up:
        config["featureGates"] = dict(FEATURE_GATES)
    return config


def chart_values(args: KueueArgs) -> dict[str, Any]:
    """The release's values: the manager config as the YAML string the chart takes."""
    return {"managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(manager_config(args), sort_keys=False)}}


def resource_flavor(args: ResourceFlavorArgs) -> dict[str, Any]:
    """Render a ResourceFlavor."""
    spec = {"nodeLabels": dict(args.node_labels)} if args.node_labels else {}
    return {
        "apiVersion": KUEUE_API,
        "kind": "ResourceFlavor",
        "metadata": {"name": args.name},
        "spec": spec,
    }


def cluster_queue(args: ClusterQueueArgs) -> dict[str, Any]:
    """Render a ClusterQueue open to every namespace; one resource group covers all quoted resources."""
    covered = sorted(next(iter(args.quotas.values())))
    flavors = [
        {"name": flavor, "resources": [{"name": r, "nominalQuota": resources[r]} for r in covered]}
        for flavor, resources in args.quotas.items()
    ]
    return {
        "apiVersion": KUEUE_API,
        "kind": "ClusterQueue",
        "metadata": {"name": args.name},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [{"coveredResources": covered, "flavors": flavors}],
        },
    }


LOCAL_QUEUE_REPLACED_ON = ("spec.clusterQueue",)
"""A LocalQueue's ``spec.clusterQueue`` is immutable (its CRD's rule ``self == oldSelf``, kubernetes-sigs/kueue
v0.19.2 ``config/components/crd/bases/kueue.x-k8s.io_localqueues.yaml``): a change replaces the queue."""


def local_queue(args: LocalQueueArgs) -> dict[str, Any]:
    """Render a LocalQueue."""
    return {
        "apiVersion": KUEUE_API,
        "kind": "LocalQueue",
        "metadata": {"name": args.name, "namespace": args.namespace},
        "spec": {"clusterQueue": args.cluster_queue},
    }


class Kueue(pulumi.ComponentResource):
    """Kueue's controller and webhooks, then its flavors (and, with ``atomic_scale_up``, its ProvisioningRequest
    admission check), cluster queues and local queues, in that order.

    The Helm release, which installs the ``kueue.x-k8s.io`` CRDs, is the ``release`` attribute.
    """

    namespace: pulumi.Output[str]
    """The namespace of the release."""
    cluster_queues: pulumi.Output[Sequence[str]]
    """The names of the ClusterQueues, in the order given (a job's ``cluster_queue``)."""

    def __init__(self, name: str, args: KueueInput, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        """Install Kueue and create its queues; ``args`` is a ``KueueArgs`` or a mapping of its fields.

        Raises:
            ArgumentError: an argument is invalid.
        """
        args = args_from(KueueArgs, args)
        super().__init__(token("Kueue"), name, None, aliased(opts, "trainplane:addons:Kueue"))
        self.release = helm_release(
            f"{name}-release", KUEUE, release_name="kueue", namespace=args.namespace, parent=self,
            values=chart_values(args), chart_path=args.chart_path,
        )
        flavors = [custom_resource(f"{name}-flavor-{f.name}", resource_flavor(f), parent=self,
                                   depends_on=[self.release]) for f in args.flavors]
        checks = [install_admission_check(name, self, [self.release])] if args.atomic_scale_up else []
        queues = {
            q.name: custom_resource(
                f"{name}-clusterqueue-{q.name}",
                with_admission_check(cluster_queue(q)) if checks else cluster_queue(q),
                parent=self,
                depends_on=[self.release, *flavors, *checks],
            )
            for q in args.cluster_queues
        }
        for q in args.local_queues:
            custom_resource(
                f"{name}-localqueue-{q.namespace}-{q.name}",
                local_queue(q),
                parent=self,
                depends_on=[self.release, queues[q.cluster_queue]],
                replace_on=LOCAL_QUEUE_REPLACED_ON,
            )
        self.namespace = pulumi.Output.from_input(args.namespace)
        names = [q.name for q in args.cluster_queues]
        self.cluster_queues = pulumi.Output.all(*(queues[name].urn for name in names)).apply(lambda _: names)
        self.register_outputs({"namespace": self.namespace, "cluster_queues": self.cluster_queues})


Kueue.__doc__ = inspect.cleandoc(Kueue.__doc__ or "")
