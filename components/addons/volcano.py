"""``Volcano``: the Volcano batch scheduler (Helm, pinned) and a default Queue for trainplane jobs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import pulumi

from components import validate
from components.addons.helm import helm_release
from components.addons.objects import custom_resource
from components.addons.versions import VOLCANO, VOLCANO_API

BUILTIN_QUEUE = "default"
"""The queue Volcano creates itself; PodGroups without ``spec.queue`` land there."""


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
    """Render the Queue: cluster-scoped, reclaimable, weighted."""
    return {
        "apiVersion": VOLCANO_API,
        "kind": "Queue",
        "metadata": {"name": args.queue},
        "spec": {"weight": args.queue_weight, "reclaimable": True},
    }


class Volcano(pulumi.ComponentResource):
    """Volcano's scheduler, controllers and admission webhook, plus a Queue.

    The release waits for the webhook to be ready, so the Queue (and any PodGroup that depends
    on this component) is admitted.

    Attributes:
        release: The Helm release (installs the ``scheduling.volcano.sh`` CRDs).
        queue: The Queue custom resource.
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
        self.register_outputs({"queue": args.queue})
