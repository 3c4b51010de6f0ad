"""``TrainerV2``: Kubeflow Trainer v2 with JobSet (Helm, pinned), and trainplane's ClusterTrainingRuntimes.

No ``from __future__ import annotations`` here: the ``trainplane`` package's schema is inferred from the
component's annotations at run time (``components.package``).
"""

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Union

import pulumi

from components import docs, validate
from components.addons.helm import helm_release, local_chart
from components.addons.inputs import TrainerV2ArgsDict
from components.addons.objects import custom_resource
from components.addons.trainer_runtime import RUNTIME_GANG_SCHEDULERS, RUNTIME_NAMES, cluster_training_runtime
from components.addons.versions import TRAINER
from components.arguments import args_from
from components.capabilities import NO_GANG
from components.tokens import token
from runtime.agent import contract

RELEASE_NAME = "kubeflow-trainer"


@dataclass(frozen=True)
class TrainerV2Args:
    """Settings of Kubeflow Trainer v2 (fields documented by ``TrainerV2ArgsDict``).

    Raises:
        ArgumentError: ``namespace`` is not a DNS label, ``chart_path`` holds no copy of the pinned chart, or
            ``gang_schedulers`` names one twice or one without a runtime.
    """

    namespace: str = "kubeflow-system"
    """Namespace of the release (the chart's documented one)."""
    chart_path: Optional[str] = None
    """A local directory (or ``.tgz``) of the kubeflow-trainer 2.3.0 chart, with its ``jobset`` dependency in its
    ``charts/``, installed instead of the chart from its OCI registry (for a cluster behind a firewall); another chart
    or version is refused."""
    install_jobset: bool = True
    """Install JobSet v0.12.0 with the chart (its ``jobset.install``); unset it where JobSet runs already."""
    gang_schedulers: Sequence[str] = (NO_GANG,)
    """The gang schedulers to make a ClusterTrainingRuntime for: ``none`` (``trainplane``, also for Kueue),
    ``volcano`` (``trainplane-volcano``), ``scheduler-plugins`` (``trainplane-coscheduling``). The Trainer
    watches PodGroups only if their CRD exists when it starts: pass the gang scheduler's add-on in
    ``dependsOn``."""

    def __post_init__(self) -> None:
        validate.dns_label("namespace", self.namespace)
        if self.chart_path is not None:
            local_chart("chart_path", self.chart_path, TRAINER)
        gangs = validate.strings("gang_schedulers", self.gang_schedulers)
        for gang in gangs:
            validate.one_of("gang_schedulers", gang, RUNTIME_GANG_SCHEDULERS)
        validate.require("gang_schedulers", list(gangs), validate.LISTED_ONCE)
        object.__setattr__(self, "gang_schedulers", gangs)


docs.document_fields(TrainerV2Args)

if TYPE_CHECKING:
    TrainerV2Input = Optional[Union[TrainerV2Args, TrainerV2ArgsDict]]
else:
    TrainerV2Input = TrainerV2ArgsDict  # the package schema is inferred from the TypedDict


def chart_values(args: TrainerV2Args) -> dict[str, object]:
    """The release's values: JobSet as a dependency or not (kubeflow/trainer v2.3.0
    ``charts/kubeflow-trainer/values.yaml``, ``jobset.install``); the chart's own runtimes stay off."""
    return {"jobset": {"install": args.install_jobset}}


class TrainerV2(pulumi.ComponentResource):
    """Kubeflow Trainer v2.3.0 (its controller, webhooks and the ``trainer.kubeflow.org`` CRDs) with JobSet
    v0.12.0, and one trainplane ClusterTrainingRuntime per gang scheduler in ``gang_schedulers``, created once
    the release (and so the Trainer's webhook) is ready. A ``DistributedJob`` with ``backend="trainjob"``
    makes its TrainJob on the runtime of its ``gang_scheduler``; pass this component in its
    ``crd_dependencies`` (``dependsOn`` from another language).

    Python attributes beside the outputs: ``release`` (the Helm release) and ``runtime_resources`` (the
    ClusterTrainingRuntimes, by gang scheduler).
    """

    runtimes: pulumi.Output[list[str]]
    """The names of the ClusterTrainingRuntimes created, in ``gang_schedulers`` order."""
    namespace: pulumi.Output[str]
    """The namespace of the release."""

    def __init__(
        self, name: str, args: TrainerV2Input = None, opts: Optional[pulumi.ResourceOptions] = None
    ) -> None:
        """Install the Trainer; ``args`` is a ``TrainerV2Args``, a mapping of its fields, or ``None`` for the
        defaults.

        Raises:
            ArgumentError: an argument is invalid.
        """
        args = args_from(TrainerV2Args, args)
        super().__init__(token("TrainerV2"), name, None, opts)
        self.release = helm_release(
            f"{name}-release", TRAINER, release_name=RELEASE_NAME, namespace=args.namespace, parent=self,
            values=chart_values(args), chart_path=args.chart_path,
        )
        labels = {contract.LABEL_PART_OF: contract.APP_NAME, contract.LABEL_MANAGED_BY: "pulumi"}
        self.runtime_resources = {
            gang: custom_resource(f"{name}-runtime-{gang}", cluster_training_runtime(gang, labels), parent=self,
                                  depends_on=[self.release])
            for gang in args.gang_schedulers
        }
        names = [RUNTIME_NAMES[gang] for gang in args.gang_schedulers]
        created = [r.urn for r in self.runtime_resources.values()]
        self.runtimes = pulumi.Output.all(*created).apply(lambda _: names)
        self.namespace = pulumi.Output.from_input(args.namespace)
        self.register_outputs({"runtimes": self.runtimes, "namespace": self.namespace})


TrainerV2.__doc__ = inspect.cleandoc(TrainerV2.__doc__ or "")
