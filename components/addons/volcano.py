"""``Volcano``: the Volcano batch scheduler (Helm, pinned) and a default Queue for trainplane jobs.

No ``from __future__ import annotations`` here: the ``trainplane`` package's schema is inferred from the
component's annotations at run time (``components.package``).
"""

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Union

import pulumi
import pulumi_kubernetes as k8s

from components import docs, validate
from components.addons.helm import helm_release, local_chart
from components.addons.inputs import VolcanoArgsDict
from components.addons.objects import custom_resource
from components.addons.versions import VOLCANO, VOLCANO_API
from components.arguments import args_from
from components.awaiting import WAIT_FOR_ANNOTATION
from components.tokens import aliased, token

BUILTIN_QUEUE = "default"
"""The queue Volcano's scheduler creates at start-up; PodGroups without ``spec.queue`` land there (the
PodGroup CRD defaults ``spec.queue`` to it)."""
QUEUE_OPEN = "jsonpath={.status.state}=Open"
"""``pulumi.com/waitFor`` condition: the queue controller has opened the queue.

Volcano's PodGroup admission refuses a PodGroup whose queue is not yet ``Open`` ("can only submit
PodGroup to queue with state `Open`", volcano-sh/volcano v1.15.1
``pkg/webhooks/admission/podgroups/validate/validate_podgroup.go``, ``checkQueueState``), a state its
queue controller sets after the Queue is created (``pkg/controllers/queue/state``). pulumi-kubernetes
treats a custom resource as ready at once, so without this a job's PodGroup races the queue on the
first ``pulumi up``."""


@dataclass(frozen=True)
class VolcanoArgs:
    """Settings of Volcano (fields documented by ``VolcanoArgsDict``).

    Raises:
        ArgumentError: A name is not a DNS label, the weight is below 1, or ``chart_path`` holds no copy of the
            pinned chart.
    """

    queue: str = "trainplane"
    """Name of the Queue created for trainplane jobs."""
    queue_weight: int = 1
    """The queue's share of the cluster relative to other queues' weights."""
    namespace: str = "volcano-system"
    """Namespace of the release."""
    chart_path: Optional[str] = None
    """A local directory (or ``.tgz``) of the volcano 1.15.1 chart, installed instead of the chart from its repository
    (for a cluster behind a firewall); another chart or version is refused."""

    def __post_init__(self) -> None:
        validate.dns_label("queue", self.queue)
        validate.integer("queue_weight", self.queue_weight, minimum=1)
        validate.dns_label("namespace", self.namespace)
        if self.chart_path is not None:
            local_chart("chart_path", self.chart_path, VOLCANO)

    @property
    def queues(self) -> tuple[str, ...]:
        """Queues a job may name: the created one and Volcano's built-in ``default``."""
        return (self.queue, BUILTIN_QUEUE)


docs.document_fields(VolcanoArgs)

if TYPE_CHECKING:
    VolcanoInput = Optional[Union[VolcanoArgs, VolcanoArgsDict]]
else:
    VolcanoInput = VolcanoArgsDict  # the package schema is inferred from the TypedDict


def volcano_queue(args: VolcanoArgs) -> dict[str, Any]:
    """Render the Queue: cluster-scoped, reclaimable, weighted; Pulumi waits until it is ``Open``."""
    return {
        "apiVersion": VOLCANO_API,
        "kind": "Queue",
        "metadata": {"name": args.queue, "annotations": {WAIT_FOR_ANNOTATION: QUEUE_OPEN}},
        "spec": {"weight": args.queue_weight, "reclaimable": True},
    }


def builtin_queue_ready() -> dict[str, Any]:
    """A patch of Volcano's own ``default`` Queue that only adds the annotation making Pulumi wait until
    it is ``Open``: jobs may submit there too, and the scheduler creates it asynchronously.

    Nothing orders the patch after the scheduler's creation, and nothing need: no resource of the program
    stands for it, and the two do not race. The scheduler makes ``default`` at start-up, before it serves
    its health port (volcano-sh/volcano v1.15.1 ``pkg/scheduler/cache/cache.go``, ``newDefaultAndRootQueue``:
    Get, else Create with ``reclaimable: true, weight: 1``, ``AlreadyExists`` counting as done), but the chart
    gives it no readiness probe (``installer/helm/chart/volcano/templates/scheduler.yaml``), so the release
    may be ready first. pulumi-kubernetes applies a Patch resource with server-side apply, which creates a
    missing object (provider/v4 at the pinned commit, ``provider/pkg/await/await.go``, ``Creation``: "we
    currently always upsert"); Volcano's queue webhook gives it the scheduler's values
    (``pkg/webhooks/admission/queues/mutate/mutate_queue.go``: ``reclaimable`` true, ``weight`` 1), and the
    scheduler then finds it. Either way one ``default`` Queue has the scheduler's spec and the annotation,
    and Pulumi waits until it is ``Open`` (``tests/cluster/test_volcano_addon.py`` runs both orders)."""
    return {
        "apiVersion": VOLCANO_API,
        "kind": "Queue",
        "metadata": {"name": BUILTIN_QUEUE, "annotations": {WAIT_FOR_ANNOTATION: QUEUE_OPEN}},
    }


class Volcano(pulumi.ComponentResource):
    """Volcano's scheduler, controllers and admission webhook, plus a Queue for trainplane jobs.

    The Queues come after the release, which waits for Volcano's Deployments; the component is done
    once both the Queue and Volcano's ``default`` queue are ``Open``, so a PodGroup that depends on it is
    admitted too. (The chart's admission Deployment has no readiness probe while its webhooks have
    ``failurePolicy: Fail``, volcano-sh/volcano v1.15.1 ``installer/helm/chart/volcano/templates/``
    ``admission.yaml`` and ``webhooks.yaml``, and pulumi-kubernetes retries a create only on NotFound: on a
    first install a Queue sent before the webhook serves may be refused, and the next ``pulumi up`` makes it.)
    Jobs using Volcano should depend on the component (``crd_dependencies``, or
    ``dependsOn`` from another language).

    Python attributes beside the outputs: ``release`` (the Helm release, which installs the
    ``scheduling.volcano.sh`` CRDs), ``queue_resource`` (the Queue) and ``builtin_queue`` (the patch that
    waits for Volcano's ``default`` Queue to be ``Open``).
    """

    queue: pulumi.Output[str]
    """The name of the Queue created for trainplane jobs (a job's ``queue``)."""
    namespace: pulumi.Output[str]
    """The namespace of the release."""

    def __init__(
        self, name: str, args: VolcanoInput = None, opts: Optional[pulumi.ResourceOptions] = None
    ) -> None:
        """Install Volcano; ``args`` is a ``VolcanoArgs``, a mapping of its fields, or ``None`` for the
        defaults.

        Raises:
            ArgumentError: an argument is invalid.
        """
        args = args_from(VolcanoArgs, args)
        super().__init__(token("Volcano"), name, None, aliased(opts, "trainplane:addons:Volcano"))
        self.release = helm_release(
            f"{name}-release",
            VOLCANO,
            release_name="volcano",
            namespace=args.namespace,
            parent=self,
            values={},
            chart_path=args.chart_path,
        )
        self.queue_resource = custom_resource(
            f"{name}-queue", volcano_queue(args), parent=self, depends_on=[self.release]
        )
        ready = builtin_queue_ready()
        self.builtin_queue = k8s.apiextensions.CustomResourcePatch(
            f"{name}-default-queue",
            api_version=ready["apiVersion"],
            kind=ready["kind"],
            metadata=ready["metadata"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.release]),
        )
        self.queue = pulumi.Output.all(self.queue_resource.urn, args.queue).apply(lambda known: known[1])
        self.namespace = pulumi.Output.from_input(args.namespace)
        self.register_outputs({"queue": self.queue, "namespace": self.namespace})


Volcano.__doc__ = inspect.cleandoc(Volcano.__doc__ or "")
