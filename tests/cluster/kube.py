"""What the cluster tests share: objects created through the real API server, read back, and waited on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, dynamic
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import NotFoundError

from testbed.cluster.waiting import wait_for

WAIT = 120.0
"""Seconds a controller may take to act on a busy 2-core machine."""


def create(api: client.ApiClient, body: dict[str, Any]) -> dict[str, Any]:
    """Create ``body`` through the API server; returns the stored object (defaults filled in)."""
    resource = dynamic.DynamicClient(api).resources.get(api_version=body["apiVersion"], kind=body["kind"])
    namespace = body["metadata"].get("namespace") if resource.namespaced else None
    created = resource.create(body=body, namespace=namespace)
    return dict(created.to_dict())


def live(api: client.ApiClient, body: dict[str, Any]) -> dict[str, Any] | None:
    """The object ``body`` names (apiVersion, kind, name, namespace) as the API server holds it now, or None."""
    resource = dynamic.DynamicClient(api).resources.get(api_version=body["apiVersion"], kind=body["kind"])
    try:
        return dict(resource.get(name=body["metadata"]["name"], namespace=body["metadata"].get("namespace")).to_dict())
    except NotFoundError:
        return None


def missing_from(sent: Any, stored: Any, path: str = "") -> list[str]:
    """The paths of ``sent`` that ``stored`` lacks or holds differently: fields the server pruned (an
    unknown field under a structural schema) or changed."""
    if isinstance(sent, dict):
        if not isinstance(stored, dict):
            return [path or "."]
        return [p for k, v in sent.items() for p in missing_from(v, stored.get(k), f"{path}.{k}")]
    if isinstance(sent, list):
        if not isinstance(stored, list) or len(sent) != len(stored):
            return [path]
        return [p for i, (a, b) in enumerate(zip(sent, stored)) for p in missing_from(a, b, f"{path}[{i}]")]
    return [] if sent == stored or str(sent) == str(stored) else [path]


def pods(api: client.ApiClient, namespace: str, selector: str) -> list[client.V1Pod]:
    """The pods matching a label selector."""
    return list(client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector).items)


def wait_for_pods(api: client.ApiClient, namespace: str, selector: str, count: int,
                  bound: bool = True, timeout: float = WAIT) -> list[client.V1Pod]:
    """Wait until ``count`` pods match ``selector`` (and, with ``bound``, each is scheduled to a node), ``timeout``
    seconds at most."""
    def enough() -> list[client.V1Pod] | None:
        found = pods(api, namespace, selector)
        if len(found) >= count and (not bound or all(p.spec.node_name for p in found)):
            return found
        return None
    return wait_for(enough, timeout, f"{count} pods {selector!r} in {namespace}")


def apply_crd(api: client.ApiClient, path: Path) -> str:
    """Create the CRD in ``path`` (one YAML document) and wait until it is Established; returns its name."""
    body = yaml.safe_load(path.read_text())
    extensions = client.ApiextensionsV1Api(api)
    extensions.create_custom_resource_definition(body)
    name = str(body["metadata"]["name"])

    def established() -> bool:
        crd = extensions.read_custom_resource_definition(name)
        return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])

    wait_for(established, WAIT, f"the CRD {name} to be Established")
    return name


def delete_crd(api: client.ApiClient, name: str) -> None:
    """Delete the CRD ``name`` and wait until it is gone (its custom resources deleted with it), so it can be
    created again at once."""
    extensions = client.ApiextensionsV1Api(api)
    extensions.delete_custom_resource_definition(name)

    def gone() -> bool:
        try:
            extensions.read_custom_resource_definition(name)
        except ApiException as err:
            if err.status == 404:
                return True
            raise
        return False

    wait_for(gone, WAIT, f"the CRD {name} to be deleted")
