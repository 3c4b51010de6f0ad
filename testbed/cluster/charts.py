"""The add-ons' local copies for the test cluster: each pinned chart (and the training operator's overlay) as its
release's Go module zip holds it, found in the Go module cache (``go mod download`` when it is not there yet).

No chart repository can be reached from this machine, and the charts are never committed: each upstream module
ships its chart beside its sources, at the release the add-on pins (each ``Chart.yaml`` names the chart and version
``components/addons/versions.py`` pins, which the add-ons check). The module cache is read-only; Helm and kustomize
only read a local chart or overlay.

Not here: the NVIDIA device plugin is served (github.com/NVIDIA/k8s-device-plugin v0.19.0,
``deployments/helm/nvidia-device-plugin``) but no stack the test cluster deploys installs it; the Kubeflow Trainer's
chart wants its ``jobset`` dependency in its ``charts/`` (``Chart.yaml``), which its module zip leaves out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from testbed.cluster import versions
from testbed.cluster.build import BuildError
from testbed.cluster.crds import _download
from testbed.cluster.paths import cache_root


@dataclass(frozen=True)
class LocalCopy:
    """Where a module zip holds an add-on's chart or overlay.

    Args:
        module: the module path.
        version: its release (the add-on's pin).
        directory: the chart or overlay inside the module.
    """

    module: str
    version: str
    directory: str


COPIES = {
    "kueue": LocalCopy("sigs.k8s.io/kueue", versions.KUEUE, "charts/kueue"),
    "training-operator": LocalCopy("github.com/kubeflow/training-operator", versions.TRAINING_OPERATOR,
                                   "manifests/overlays/standalone"),
    "volcano": LocalCopy("volcano.sh/volcano", versions.VOLCANO, "installer/helm/chart/volcano"),
}
"""Per add-on name (as ``trainplane:addons`` spells it), its local copy."""


def local_copy(addon: str) -> Path:
    """The directory of ``addon``'s chart or overlay in the Go module cache, downloading the module if needed.

    Raises:
        KeyError: no local copy is known for ``addon``.
        BuildError: the module could not be downloaded, or holds no such directory.
    """
    copy = COPIES[addon]
    work = cache_root() / "charts"
    work.mkdir(parents=True, exist_ok=True)
    found = _download(copy.module, copy.version, work, "Dir") / copy.directory
    if not found.is_dir():
        raise BuildError(f"{copy.module}@{copy.version} holds no {copy.directory}")
    return found


def addon_copies(addons: list[str]) -> dict[str, str]:
    """A stack's ``trainplane:addonCopies`` for ``addons``: each one's local copy, by absolute path.

    Raises:
        KeyError, BuildError: as :func:`local_copy`.
    """
    return {addon: str(local_copy(addon)) for addon in addons}
