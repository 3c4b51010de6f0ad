"""One way to install a pinned Helm chart, shared by the add-ons, from its repository or a local copy."""

from __future__ import annotations

import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components import validate
from components.addons.versions import HelmChart
from components.errors import ArgumentError

CHART_FILE = "Chart.yaml"
ARCHIVE_SUFFIXES = (".tgz", ".tar.gz")
"""How ``helm package`` and ``helm pull`` name a chart archive."""


def _chart_metadata(path: Path) -> Optional[dict[str, Any]]:
    """The ``Chart.yaml`` of a chart directory, or of the one top-level directory of a chart archive (as
    ``helm package`` writes it); ``None`` when there is none."""
    if path.is_dir():
        found = path / CHART_FILE
        return yaml.safe_load(found.read_text()) if found.is_file() else None
    if path.is_file() and path.name.endswith(ARCHIVE_SUFFIXES):
        with tarfile.open(path) as archive:
            member = next((m for m in archive.getmembers()
                           if m.isfile() and len(Path(m.name).parts) == 2 and Path(m.name).name == CHART_FILE), None)
            data = archive.extractfile(member) if member is not None else None
            return yaml.safe_load(data.read()) if data is not None else None
    return None


def local_chart(field: str, path: object, chart: HelmChart) -> str:
    """Check that ``path`` holds a copy of the pinned ``chart``: a chart directory or a ``.tgz`` of one whose
    ``Chart.yaml`` names that chart at that version, so the values the add-on renders for the pin are the
    ones the chart reads.

    Args:
        field: the argument's name, for the error.
        path: the directory or archive, as given (relative to the Pulumi program's directory).
        chart: the pinned chart.

    Returns:
        The path, unchanged.

    Raises:
        ArgumentError: ``path`` is blank, holds no chart, or holds another chart or version.
    """
    text = validate.text(field, path)
    pinned = f"the {chart.name} chart, version {chart.version}"
    metadata = _chart_metadata(Path(text))
    if not isinstance(metadata, dict):
        raise ArgumentError(field, path, f"holds no {CHART_FILE}", f"point it at a directory holding {CHART_FILE}, "
                                                                   f"or a .tgz of one, with {pinned}")
    found = (metadata.get("name"), str(metadata.get("version")))
    if found != (chart.name, chart.version):
        raise ArgumentError(field, path, f"holds the {found[0]} chart, version {found[1]}",
                            f"use a copy of {pinned} (the add-on's settings are written for that release)")
    return text


def helm_release(
    name: str,
    chart: HelmChart,
    *,
    release_name: str,
    namespace: str,
    parent: pulumi.Resource,
    values: Mapping[str, Any],
    skip_await: bool = False,
    provider: Optional[pulumi.ProviderResource] = None,
    depends_on: Sequence[pulumi.Resource] = (),
    chart_path: Optional[str] = None,
) -> k8s.helm.v3.Release:
    """Install ``chart`` as a Helm release (hooks run, CRDs from ``crds/`` installed first).

    Args:
        name: Pulumi name of the release resource.
        chart: The pinned chart.
        release_name: Helm's name for the release.
        namespace: Namespace of the release; created if missing.
        parent: The add-on component that owns the release.
        values: Chart values.
        skip_await: Do not wait for the release's workloads to become ready. Set it for charts
            whose pods run only on nodes that may not exist yet.
        provider: The Kubernetes provider, when the parent does not pass one on (a cluster component
            installing into the cluster it creates).
        depends_on: Resources the release waits for.
        chart_path: A local chart directory (or archive) to install instead of the chart repository's.

    Returns:
        The release resource.
    """
    remote = chart_path is None
    repository = k8s.helm.v3.RepositoryOptsArgs(repo=chart.repository) if remote and chart.repository else None
    return k8s.helm.v3.Release(
        name,
        k8s.helm.v3.ReleaseArgs(
            chart=chart.chart if chart_path is None else chart_path,
            version=chart.version if remote else None,
            repository_opts=repository,
            name=release_name,
            namespace=namespace,
            create_namespace=True,
            values=dict(values),
            skip_await=skip_await,
        ),
        opts=pulumi.ResourceOptions(parent=parent, provider=provider, depends_on=list(depends_on) or None),
    )
