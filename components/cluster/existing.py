"""``ExistingCluster``: any cluster reachable through a kubeconfig (path or content) and context."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components import validate
from components.errors import ArgumentError

DEFAULT_KUBECONFIG = "~/.kube/config"
"""kubectl's default kubeconfig file, used when no kubeconfig is given."""
CONTENT_PLACEHOLDER = "<kubeconfig content>"
"""Shown in errors instead of kubeconfig content, which holds credentials."""


ACCESS_MODES = frozenset({"ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"})


@dataclass(frozen=True)
class ExistingClusterArgs:
    """How to reach an existing cluster.

    Attributes:
        kubeconfig: Path to a kubeconfig file, or the file's content (anything with a newline);
            ``None`` reads ``~/.kube/config``.
        context: Context to use; ``None`` uses the kubeconfig's ``current-context``.
        gpu_nodes: Whether the cluster has NVIDIA GPU nodes (labelled and tainted as in
            ``runtime.agent.contract``); jobs asking for GPUs are refused otherwise.
        storage_classes: The StorageClasses jobs' claims may name, each with the access modes it supports
            (``{"efs": ["ReadWriteMany"]}``); ``None`` leaves claims unchecked.
        default_storage_class: The cluster's default StorageClass, one of ``storage_classes``.

    Raises:
        ArgumentError: ``kubeconfig`` or ``context`` is given but blank, ``gpu_nodes`` is not a bool, or the
            storage classes are not a mapping of names to access modes including the default.
    """

    kubeconfig: Optional[str] = None
    context: Optional[str] = None
    gpu_nodes: bool = False
    storage_classes: Optional[Mapping[str, Sequence[str]]] = None
    default_storage_class: Optional[str] = None

    def __post_init__(self) -> None:
        for field in ("kubeconfig", "context"):
            if getattr(self, field) is not None:
                validate.text(field, getattr(self, field))
        validate.boolean("gpu_nodes", self.gpu_nodes)
        classes = self.storage_classes
        if classes is not None and (not isinstance(classes, Mapping) or not all(
                isinstance(m, (list, tuple)) and set(m) <= ACCESS_MODES for m in classes.values())):
            raise ArgumentError("storage_classes", classes, "must map each storage class to a list of access modes",
                                f"map each class to access modes from {sorted(ACCESS_MODES)}")
        if self.default_storage_class is not None:
            validate.require("default_storage_class", self.default_storage_class,
                             validate.defined("storage class", set(classes or {})))


def is_content(kubeconfig: str) -> bool:
    """Tell kubeconfig content from a path: content spans several lines, a path does not."""
    return "\n" in kubeconfig.strip()


def load_kubeconfig(args: ExistingClusterArgs) -> str:
    """Return the kubeconfig content and check that the requested context is in it.

    Args:
        args: Where the kubeconfig is and which context to use.

    Returns:
        The kubeconfig file's content.

    Raises:
        ArgumentError: The file does not exist, is not a kubeconfig, or lacks ``args.context``.
    """
    source = args.kubeconfig or DEFAULT_KUBECONFIG
    shown = CONTENT_PLACEHOLDER if is_content(source) else source
    if is_content(source):
        content = source
    else:
        path = Path(source).expanduser()
        if not path.is_file():
            raise ArgumentError("kubeconfig", source, f"no file at {path}", "give a kubeconfig path or its content")
        content = path.read_text(encoding="utf-8")
    try:
        parsed = yaml.safe_load(content)
    except yaml.YAMLError as exc:
        raise ArgumentError("kubeconfig", shown, f"not valid YAML ({exc})", "give a kubeconfig") from exc
    if not isinstance(parsed, dict) or not isinstance(parsed.get("contexts"), list):
        raise ArgumentError("kubeconfig", shown, "has no 'contexts' list", "give a kubeconfig file")
    names = [entry.get("name") for entry in parsed["contexts"] if isinstance(entry, dict)]
    if args.context is not None:
        validate.require("context", args.context, validate.defined("kubeconfig context", [str(n) for n in names]))
    return content


class ExistingCluster(pulumi.ComponentResource):
    """A cluster that trainplane does not create: only a provider for it.

    Attributes:
        provider: Kubernetes provider bound to the kubeconfig and context.
        kubeconfig: The kubeconfig content (secret).
        gpu_nodes: Copied from ``args.gpu_nodes``.
    """

    def __init__(
        self, name: str, args: ExistingClusterArgs, opts: Optional[pulumi.ResourceOptions] = None
    ) -> None:
        super().__init__("trainplane:cluster:ExistingCluster", name, None, opts)
        self.gpu_nodes = args.gpu_nodes
        self.kubeconfig: pulumi.Output[str] = pulumi.Output.secret(load_kubeconfig(args))
        self.provider = k8s.Provider(
            f"{name}-provider",
            kubeconfig=self.kubeconfig,
            context=args.context,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"kubeconfig": self.kubeconfig})
