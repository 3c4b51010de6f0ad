"""``Volcano``: the Volcano batch scheduler (Helm, pinned) and a default Queue for trainplane jobs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s

from components import validate
from components.addons.helm import helm_release
from components.addons.objects import custom_resource
from components.addons.versions import VOLCANO, VOLCANO_API
from components.awaiting import WAIT_FOR_ANNOTATION

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
    """Settings of Volcano.

    Attributes:
        queue: Name of the Queue created for trainplane jobs.
        queue_weight: The queue's share of the cluster relative to other queues' weights.
        namespace: Namespace of the release.

    Raises:
        ArgumentError: A name is not a DNS label or the weight is below 1.
    """

    queue: str = "trainplane"
    queue_weight: int = 1
    namespace: str = "volcano-system"

    def __post_init__(self) -> None:
        validate.dns_label("queue", self.queue)
        validate.integer("queue_weight", self.queue_weight, minimum=1)
        validate.dns_label("namespace", self.namespace)

    @property
    def queues(self) -> tuple[str, ...]:
        """Queues a job may name: the created one and Volcano's built-in ``default``."""
        return (self.queue, BUILTIN_QUEUE)


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
    it is ``Open``: jobs may submit there too, and the scheduler creates it asynchronously."""
    return {
        "apiVersion": VOLCANO_API,
        "kind": "Queue",
        "metadata": {"name": BUILTIN_QUEUE, "annotations": {WAIT_FOR_ANNOTATION: QUEUE_OPEN}},
    }


class Volcano(pulumi.ComponentResource):
    """Volcano's scheduler, controllers and admission webhook, plus a Queue.

    The release waits for the webhook to be ready, so the Queue is admitted; the component is done
    once both the Queue and Volcano's ``default`` queue are ``Open``, so a PodGroup that depends on it is
    admitted too.

    Attributes:
        release: The Helm release (installs the ``scheduling.volcano.sh`` CRDs).
        queue: The Queue custom resource.
        builtin_queue: The patch that waits for Volcano's ``default`` Queue to be ``Open``.
    """

    def __init__(
        self, name: str, args: Optional[VolcanoArgs] = None, opts: Optional[pulumi.ResourceOptions] = None
    ) -> None:
        super().__init__("trainplane:addons:Volcano", name, None, opts)
        args = args or VolcanoArgs()
        self.release = helm_release(
            f"{name}-release",
            VOLCANO,
            release_name="volcano",
            namespace=args.namespace,
            parent=self,
            values={},
        )
        self.queue = custom_resource(
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
        self.register_outputs({"queue": args.queue})
