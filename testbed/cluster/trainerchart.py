"""Kubeflow Trainer v2's Helm chart as a local chart directory, from the Go modules the managers are built from,
and its release's two managers run out of cluster under the release's own identity and configuration (issue 24).

The chart: ``charts/kubeflow-trainer`` of github.com/kubeflow/trainer/v2 at v2.3.0, with each dependency its
``Chart.yaml`` lists (``jobset`` 0.12.0, ``lws`` 0.8.0) in its ``charts/`` as ``helm dependency build`` would put
them, each copied from ``charts/<name>`` of its own module at that version (sigs.k8s.io/jobset, sigs.k8s.io/lws)
and versioned as its release packages it (``helm package --version <x.y.z> --app-version v<x.y.z>``: jobset
v0.12.0 ``hack/helm-chart-package.sh``, lws v0.8.0 ``hack/push-chart.sh``): Helm matches a chart in ``charts/`` to
its ``Chart.yaml`` entry by name and version range, and keeps one that matches no entry whatever its condition
(helm/helm ``pkg/chartutil/dependencies.go``, ``processDependencyEnabled``), so LWS's copy, 0.1.0 in its module,
would be installed although ``dataCache.enabled`` is off. The image
settings those scripts also rewrite are left as the module has them: the release's pods run on kwok's nodes,
which pull nothing.

The managers: the release's Deployments' pods are kwok's (Running and Ready, running nothing), and the API server
cannot reach a Service here (no kube-proxy), so each manager runs as a process on this machine
(``trainer.start``) with the release's ServiceAccount (a token from the TokenRequest API: the chart's RBAC is what
it may do) and the release's ConfigMap (its ``controller_manager_config.yaml``, ``trainer.OUT_OF_CLUSTER``
replaced), and the release's webhook configurations are pointed at it (:func:`pointed_at`).
"""

from __future__ import annotations

import base64
import shutil
from pathlib import Path
from typing import Any

import yaml

from testbed.cluster import versions
from testbed.cluster.build import BuildError
from testbed.cluster.trainer import JOBSET, TRAINER, TRAINER_MODULE, Manager, module_dir

CHART = "charts/kubeflow-trainer"
"""The chart's directory in the Trainer's module."""
DEPENDENCY_MODULES = {"jobset": "sigs.k8s.io/jobset", "lws": "sigs.k8s.io/lws"}
"""The module that holds each dependency's chart, as ``charts/<name>``."""
WEBHOOK_PATHS = {TRAINER.name: "-trainer-kubeflow-org-", JOBSET.name: ("-jobset-x-k8s-io-", "--v1-pod")}
"""What each manager's webhook paths hold (kubeflow/trainer v2.3.0 ``manifests/base/webhook/manifests.yaml``,
kubernetes-sigs/jobset v0.12.0 ``config/components/webhook/manifests.yaml``): which manager serves a webhook."""


def _copy_writable(source: Path, target: Path) -> None:
    """Copy a directory out of the (read-only) module cache, every copy writable by its owner."""
    if not source.is_dir():
        raise BuildError(f"no chart directory {source}")
    shutil.copytree(source, target)
    for path in (target, *target.rglob("*")):
        path.chmod(path.stat().st_mode | 0o200)


def local_chart(into: Path) -> Path:
    """Assemble the Trainer's chart with its dependencies under ``into`` (see the module docstring).

    Returns:
        The chart directory (``into/kubeflow-trainer``), for the add-on's ``chart_path``.

    Raises:
        BuildError: a module cannot be downloaded or holds no chart, a dependency has no known module, or the
            chart's JobSet is not the pinned one (``versions.JOBSET``).
    """
    chart = into / "kubeflow-trainer"
    _copy_writable(module_dir(TRAINER_MODULE, versions.TRAINER) / CHART, chart)
    for dependency in yaml.safe_load((chart / "Chart.yaml").read_text()).get("dependencies") or []:
        name, version = dependency["name"], str(dependency["version"])
        if name not in DEPENDENCY_MODULES:
            raise BuildError(f"the Trainer's chart needs {name} {version}, whose module is unknown")
        if name == "jobset" and f"v{version}" != versions.JOBSET:
            raise BuildError(f"the Trainer's chart needs jobset {version}; the pinned JobSet is {versions.JOBSET}")
        copy = chart / "charts" / name
        _copy_writable(module_dir(DEPENDENCY_MODULES[name], f"v{version}") / "charts" / name, copy)
        metadata = yaml.safe_load((copy / "Chart.yaml").read_text())
        metadata.update({"version": version, "appVersion": f"v{version}"})
        (copy / "Chart.yaml").write_text(yaml.safe_dump(metadata, sort_keys=False))
    return chart


def manager_of(deployment: dict[str, Any]) -> Manager:
    """Which manager a release's Deployment runs: JobSet's if its name says so, else the Trainer's.

    Raises:
        ValueError: the Deployment has no name.
    """
    name = str(deployment["metadata"]["name"])
    if not name:
        raise ValueError("a Deployment without a name")
    return JOBSET if name.startswith("jobset") else TRAINER


def release_config(deployment: dict[str, Any], configmaps: dict[str, dict[str, str]]) -> dict[str, Any]:
    """The manager configuration a release's Deployment mounts: the ConfigMap its pod's volumes name, its one key
    (``controller_manager_config.yaml`` in both charts), parsed.

    Args:
        deployment: the Deployment as the API server returns it (camelCase keys).
        configmaps: the release namespace's ConfigMaps, name -> data.

    Raises:
        ValueError: the pod mounts no ConfigMap, or one of several keys.
    """
    pod = deployment["spec"]["template"]["spec"]
    names = [v["configMap"]["name"] for v in pod.get("volumes") or [] if v.get("configMap")]
    if len(names) != 1 or len(configmaps.get(names[0], {})) != 1:
        raise ValueError(f"{deployment['metadata']['name']} mounts ConfigMaps {names}: expected one of one key")
    (text,) = configmaps[names[0]].values()
    return dict(yaml.safe_load(text))


def token_kubeconfig(admin: dict[str, Any], token: str) -> str:
    """A kubeconfig of ``admin``'s cluster (server and CA) whose user is a bearer ``token``."""
    cluster = admin["clusters"][0]["cluster"]
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "cluster", "cluster": cluster}],
        "users": [{"name": "token", "user": {"token": token}}],
        "contexts": [{"name": "token", "context": {"cluster": "cluster", "user": "token"}}],
        "current-context": "token",
    })


def pointed_at(configuration: dict[str, Any], namespace: str, ports: dict[str, int], ca: bytes) -> list[dict[str, Any]]:
    """The ``webhooks`` of a webhook configuration, those calling a Service of the release in ``namespace`` now
    calling ``https://127.0.0.1:<port><path>`` of the manager serving that path (:data:`WEBHOOK_PATHS`) and
    trusting ``ca`` (PEM); every other field as it was. Empty when none of them calls the release.

    Args:
        configuration: a Mutating- or ValidatingWebhookConfiguration (camelCase keys).
        namespace: the release's namespace.
        ports: manager name -> its webhook port on 127.0.0.1.
        ca: the CA certificate that signed the managers' serving certificates.

    Raises:
        ValueError: a webhook of the release has a path no manager serves.
    """
    hooks = configuration.get("webhooks") or []
    if not any((h["clientConfig"].get("service") or {}).get("namespace") == namespace for h in hooks):
        return []
    bundle = base64.b64encode(ca).decode()
    out = []
    for hook in hooks:
        service = hook["clientConfig"].get("service") or {}
        if service.get("namespace") != namespace:
            out.append(hook)
            continue
        path = str(service.get("path", ""))
        served = [m for m, marks in WEBHOOK_PATHS.items()
                  if any(mark in path for mark in ((marks,) if isinstance(marks, str) else marks))]
        if len(served) != 1:
            raise ValueError(f"webhook {hook['name']} calls {path!r}, which no manager serves")
        out.append({**hook, "clientConfig": {"url": f"https://127.0.0.1:{ports[served[0]]}{path}",
                                             "caBundle": bundle}})
    return out
