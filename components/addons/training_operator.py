"""``TrainingOperator``: Kubeflow Training Operator v1 (PyTorchJob and friends), pinned manifests.

No ``from __future__ import annotations`` here: the ``trainplane`` package's schema is inferred from the
component's annotations at run time (``components.package``).
"""

import copy
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components import docs, validate
from components.addons.inputs import TrainingOperatorArgsDict
from components.addons.versions import (
    SCHEDULER_PLUGINS_SCHEDULER,
    TRAINING_OPERATOR_IMAGE,
    TRAINING_OPERATOR_MANIFESTS,
    TRAINING_OPERATOR_VERSION,
    VOLCANO_SCHEDULER,
)
from components.arguments import args_from
from components.capabilities import NO_GANG, OPERATOR_GANG_SCHEDULERS, SCHEDULER_PLUGINS, VOLCANO
from components.errors import ArgumentError
from components.tokens import aliased, token

WEBHOOK_CERT_SECRET = "training-operator-webhook-cert"  # noqa: S105 - a Secret's name, not a secret
"""The Secret the operator fills with its self-signed webhook certificate at start-up."""
WEBHOOK_CONFIGURATION = "validator.training-operator.kubeflow.org"
"""The ValidatingWebhookConfiguration whose ``caBundle`` the operator patches in."""
OPERATOR_DEPLOYMENT = "training-operator"
OPERATOR_CONTAINER = "training-operator"
GANG_SCHEDULER_FLAG = "--gang-scheduler-name"
"""Operator flag: ``volcano``, or the scheduler-plugins scheduler name; unset means no gang scheduling.

kubeflow/trainer v1.9.4 ``cmd/training-operator.v1/main.go``: a value equal to ``volcano`` (ignoring
case) selects Volcano, any other non-empty value is taken as a scheduler-plugins scheduler name, and
unset leaves every PyTorchJob without a PodGroup (``pkg/controller.v1/common/job.go`` creates one only
when gang scheduling is enabled). The flag applies to every PyTorchJob the operator runs."""
FLAG_VALUES = {VOLCANO: VOLCANO_SCHEDULER, SCHEDULER_PLUGINS: SCHEDULER_PLUGINS_SCHEDULER}
"""The flag value for each gang scheduler trainplane names."""

SECRET_TYPE = "kubernetes:core/v1:Secret"  # noqa: S105 - a type token, not a secret
WEBHOOK_TYPE = "kubernetes:admissionregistration.k8s.io/v1:ValidatingWebhookConfiguration"
DEPLOYMENT_TYPE = "kubernetes:apps/v1:Deployment"


@dataclass(frozen=True)
class TrainingOperatorArgs:
    """Settings of the training operator (fields documented by ``TrainingOperatorArgsDict``).

    Raises:
        ArgumentError: ``gang_scheduler_name`` is given but blank, or ``manifests_path`` holds no copy of the pinned
            overlay.
    """

    gang_scheduler_name: Optional[str] = None
    """Value of ``--gang-scheduler-name``: ``volcano`` when Volcano is installed, a scheduler-plugins scheduler name, or
    unset for no gang scheduling. The operator exits at start-up if the matching PodGroup CRD is missing."""
    manifests_path: Optional[str] = None
    """A local copy of the v1.9.4 standalone overlay (``manifests/overlays/standalone`` of a kubeflow/trainer checkout
    at that tag, its ``../../base`` beside it), applied instead of the one fetched from GitHub (for a cluster behind a
    firewall); an overlay of another release is refused."""

    def __post_init__(self) -> None:
        if self.gang_scheduler_name is not None:
            validate.text("gang_scheduler_name", self.gang_scheduler_name)
        if self.manifests_path is not None:
            local_overlay("manifests_path", self.manifests_path)

    @classmethod
    def for_gang_scheduler(cls, gang_scheduler: str) -> "TrainingOperatorArgs":
        """The operator set up to gang-schedule every PyTorchJob with ``gang_scheduler``.

        Args:
            gang_scheduler: ``none``, ``volcano`` or ``scheduler-plugins``.

        Raises:
            ArgumentError: another value.
        """
        validate.one_of("gang_scheduler", gang_scheduler, OPERATOR_GANG_SCHEDULERS)
        return cls(gang_scheduler_name=FLAG_VALUES.get(gang_scheduler))

    @property
    def gang_scheduler(self) -> str:
        """The gang scheduler the operator applies to every PyTorchJob, read as the operator reads its flag."""
        if not self.gang_scheduler_name:
            return NO_GANG
        return VOLCANO if self.gang_scheduler_name.lower() == VOLCANO_SCHEDULER else SCHEDULER_PLUGINS


docs.document_fields(TrainingOperatorArgs)

if TYPE_CHECKING:
    TrainingOperatorInput = Optional[Union[TrainingOperatorArgs, TrainingOperatorArgsDict]]
else:
    TrainingOperatorInput = TrainingOperatorArgsDict  # the package schema is inferred from the TypedDict


KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
"""The names kustomize reads a directory's kustomization from."""


def local_overlay(field: str, path: object) -> str:
    """Check that ``path`` is a kustomize directory setting the pinned operator image
    (:data:`~components.addons.versions.TRAINING_OPERATOR_IMAGE`), as the v1.9.4 standalone overlay does.

    Returns:
        The path, unchanged.

    Raises:
        ArgumentError: ``path`` is blank, is no kustomize directory, or sets another operator image tag.
    """
    text = validate.text(field, path)
    image, tag = TRAINING_OPERATOR_IMAGE
    pinned = f"the standalone overlay of kubeflow/trainer {TRAINING_OPERATOR_VERSION}"
    found = next((Path(text) / n for n in KUSTOMIZATION_FILES if (Path(text) / n).is_file()), None)
    if found is None:
        raise ArgumentError(field, path, "holds no kustomization",
                            f"point it at a directory holding a kustomization.yaml: {pinned}")
    kustomization = yaml.safe_load(found.read_text())
    images = kustomization.get("images", []) if isinstance(kustomization, dict) else []
    tags = [i.get("newTag") for i in images if isinstance(i, dict) and i.get("name") == image]
    if tags != [tag]:
        raise ArgumentError(field, path, f"its kustomization sets {image} to {tags or 'no tag'}, not {tag}",
                            f"use a copy of {pinned}")
    return text


def _name(props: Any) -> Optional[str]:
    metadata = props.get("metadata") if isinstance(props, dict) else None
    return metadata.get("name") if isinstance(metadata, dict) else None


def ignore_webhook_cert_drift(args: pulumi.ResourceTransformArgs) -> Optional[pulumi.ResourceTransformResult]:
    """Resource transform: ignore the fields the operator rewrites itself.

    The operator generates its webhook certificate into ``training-operator-webhook-cert`` and
    patches the CA into the webhook configuration, so every ``pulumi up`` would otherwise show
    (and revert) that drift.

    Args:
        args: A resource about to be registered by the manifests component.

    Returns:
        The same resource with ``ignore_changes`` set, or None for any other resource.
    """
    name = _name(args.props)
    if args.type_ == SECRET_TYPE and name == WEBHOOK_CERT_SECRET:
        ignored = ["data", "stringData"]
    elif args.type_ == WEBHOOK_TYPE and name == WEBHOOK_CONFIGURATION:
        ignored = ["webhooks[*].clientConfig.caBundle"]
    else:
        return None
    opts = pulumi.ResourceOptions.merge(args.opts, pulumi.ResourceOptions(ignore_changes=ignored))
    return pulumi.ResourceTransformResult(props=args.props, opts=opts)


def with_gang_scheduler(deployment: dict[str, Any], scheduler: str) -> dict[str, Any]:
    """Return a copy of the operator Deployment whose container passes ``--gang-scheduler-name``.

    Args:
        deployment: The operator Deployment as rendered from the manifests.
        scheduler: The flag's value.

    Returns:
        The changed copy; any earlier value of the flag is replaced.
    """
    changed = copy.deepcopy(deployment)
    for container in changed["spec"]["template"]["spec"]["containers"]:
        if container.get("name") == OPERATOR_CONTAINER:
            kept = [a for a in container.get("args", []) if not a.startswith(f"{GANG_SCHEDULER_FLAG}=")]
            container["args"] = [*kept, f"{GANG_SCHEDULER_FLAG}={scheduler}"]
    return changed


def gang_scheduler_transform(scheduler: str) -> pulumi.ResourceTransform:
    """Resource transform that sets ``--gang-scheduler-name=<scheduler>`` on the operator.

    Args:
        scheduler: The flag's value.

    Returns:
        A transform for the manifests component.
    """

    def transform(args: pulumi.ResourceTransformArgs) -> Optional[pulumi.ResourceTransformResult]:
        if args.type_ != DEPLOYMENT_TYPE or _name(args.props) != OPERATOR_DEPLOYMENT:
            return None
        return pulumi.ResourceTransformResult(
            props=with_gang_scheduler(dict(args.props), scheduler), opts=args.opts
        )

    return transform


class TrainingOperator(pulumi.ComponentResource):
    """The Kubeflow Training Operator v1 from its pinned standalone overlay (namespace ``kubeflow``).

    Installs the ``kubeflow.org`` CRDs (PyTorchJob, ...). Pass the installed gang scheduler's
    add-on in ``opts.depends_on`` (``dependsOn``) when ``gang_scheduler_name`` is set: the operator checks
    for the PodGroup CRD at start-up. The kustomize component holding the operator's objects is the
    ``manifests`` attribute.
    """

    gang_scheduler: pulumi.Output[str]
    """The gang scheduler the operator applies to every PyTorchJob: ``none``, ``volcano`` or
    ``scheduler-plugins``; a PyTorchJob's ``gang_scheduler`` must be this one (or ``kueue`` with ``none``)."""

    def __init__(
        self,
        name: str,
        args: TrainingOperatorInput = None,
        opts: Optional[pulumi.ResourceOptions] = None,
    ) -> None:
        """Install the operator; ``args`` is a ``TrainingOperatorArgs``, a mapping of its fields, or
        ``None`` for the defaults.

        Raises:
            ArgumentError: an argument is invalid.
        """
        args = args_from(TrainingOperatorArgs, args)
        super().__init__(token("TrainingOperator"), name, None, aliased(opts, "trainplane:addons:TrainingOperator"))
        transforms: list[pulumi.ResourceTransform] = [ignore_webhook_cert_drift]
        if args.gang_scheduler_name:
            transforms.append(gang_scheduler_transform(args.gang_scheduler_name))
        self.manifests = k8s.kustomize.v2.Directory(
            f"{name}-manifests",
            directory=args.manifests_path or TRAINING_OPERATOR_MANIFESTS,
            opts=pulumi.ResourceOptions(parent=self, transforms=transforms),
        )
        self.gang_scheduler = pulumi.Output.from_input(args.gang_scheduler)
        self.register_outputs({"gang_scheduler": self.gang_scheduler})


TrainingOperator.__doc__ = inspect.cleandoc(TrainingOperator.__doc__ or "")
