"""What the tests of the add-ons' releases share: the objects a Helm release or a kustomize overlay holds, which of them
the API server has, what the stack's state lists, and the clean-up of whatever a failed run left."""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, dynamic
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from components.addons.versions import KUEUE
from testbed.cluster.engine import Engine

KUEUE_NAMESPACE, KUEUE_RELEASE = "kueue-system", "kueue"
"""Where the Kueue add-on installs its release, and its name (``components/addons/kueue.py``)."""
Key = tuple[str, str, str, str]
"""(apiVersion, kind, namespace, name) of an object; the namespace empty for a cluster-scoped kind."""


def release_manifest(api: client.ApiClient, namespace: str, release: str) -> list[dict[str, Any]]:
    """The objects of the deployed revision of a Helm release, from Helm's record in the cluster: the Secret
    ``sh.helm.release.v1.<release>.v<revision>`` (labels ``owner=helm``, ``name``, ``status``) holding the release
    as base64 of gzipped JSON, its ``manifest`` the rendered templates."""
    secrets = client.CoreV1Api(api).list_namespaced_secret(
        namespace, label_selector=f"owner=helm,name={release},status=deployed").items
    assert len(secrets) == 1, [s.metadata.name for s in secrets]
    record = json.loads(gzip.decompress(base64.b64decode(base64.b64decode(secrets[0].data["release"]))))
    return [o for o in yaml.safe_load_all(record["manifest"]) if o]


def overlay_objects(directory: Path) -> list[dict[str, Any]]:
    """The objects of a kustomize overlay as kustomize builds them, for what the training operator's uses: its
    ``resources`` (files and directories), ``secretGenerator`` names, patches that rename an object, and the
    overlay's ``namespace``."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    objects: list[dict[str, Any]] = []
    for entry in kustomization.get("resources", []):
        path = directory / entry
        objects += overlay_objects(path) if path.is_dir() else [o for o in yaml.safe_load_all(path.read_text()) if o]
    for patch in kustomization.get("patches", []):
        ops = yaml.safe_load((directory / patch["path"]).read_text())
        for op in (o for o in ops if o["path"] == "/metadata/name"):
            for target in (o for o in objects if o["kind"] == patch["target"]["kind"]):
                target["metadata"]["name"] = op["value"]
    objects += [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": g["name"]}}
                for g in kustomization.get("secretGenerator", [])]
    if kustomization.get("namespace"):
        for o in objects:
            o["metadata"]["namespace"] = kustomization["namespace"]
    return objects


def keys(api: client.ApiClient, objects: list[dict[str, Any]], default_namespace: str) -> set[Key]:
    """(apiVersion, kind, namespace, name) of each object; the namespace empty for a cluster-scoped kind."""
    found, resources = set(), dynamic.DynamicClient(api).resources
    for o in objects:
        resource = resources.get(api_version=o["apiVersion"], kind=o["kind"])
        namespace = (o["metadata"].get("namespace") or default_namespace) if resource.namespaced else ""
        found.add((o["apiVersion"], o["kind"], namespace, o["metadata"]["name"]))
    return found


def present(api: client.ApiClient, wanted: set[Key]) -> set[Key]:
    """The objects of ``wanted`` the API server holds now (kinds whose CRD is gone count as absent)."""
    held, resources = set(), dynamic.DynamicClient(api).resources
    for key in wanted:
        api_version, kind, namespace, name = key
        try:
            resource = resources.get(api_version=api_version, kind=kind)
            resource.get(name=name, namespace=namespace or None)
        except (ApiException, ResourceNotFoundError):
            continue
        held.add(key)
    return held


def state_objects(engine: Engine) -> set[tuple[str, str, str]]:
    """(kind, namespace, name) of every Kubernetes object in the stack's state (the Helm release is one resource)."""
    exported = json.loads(engine.run("stack", "export").stdout)
    return {(r["outputs"]["kind"], r["outputs"]["metadata"].get("namespace") or "", r["outputs"]["metadata"]["name"])
            for r in exported["deployment"].get("resources", [])
            if r["type"].startswith("kubernetes:") and "kind" in r.get("outputs", {})}


GATES = (("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"),
         ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"),
         ("apiregistration.k8s.io/v1", "APIService"))
"""The kinds that would refuse or hold up other tests' objects if left behind (webhooks with no server, an
aggregated API with none)."""


@contextlib.contextmanager
def removed_afterwards(api: client.ApiClient, objects: dict[str, set[Key]]) -> Iterator[None]:
    """Whatever a failed ``destroy`` (or ``up``) left of the add-ons is deleted after the test: first the Kueue
    chart's webhooks and APIServices (by its ``helm.sh/chart`` label, so also when ``up`` failed before the release
    was read) and the gate kinds among ``objects``, then the rest, and the namespace Helm made for the release."""
    try:
        yield
    finally:
        resources = dynamic.DynamicClient(api).resources
        every = set().union(*objects.values())
        for api_version, kind in GATES:
            with contextlib.suppress(ApiException):
                resources.get(api_version=api_version, kind=kind).delete(
                    label_selector=f"helm.sh/chart={KUEUE.name}-{KUEUE.version}")
        first = [k for k in every if (k[0], k[1]) in GATES]
        for api_version, kind, namespace, name in [*first, *(k for k in every if k not in first)]:
            with contextlib.suppress(ApiException, ResourceNotFoundError):
                resources.get(api_version=api_version, kind=kind).delete(name=name, namespace=namespace or None)
        with contextlib.suppress(ApiException):
            client.CoreV1Api(api).delete_namespace(KUEUE_NAMESPACE)
