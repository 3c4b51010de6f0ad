"""One way to install a pinned Helm chart, shared by the add-ons."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s

from components.addons.versions import HelmChart


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
