"""Admission webhook configurations of a controller run as a process beside the test cluster: the
release's generated configurations (``config/.../manifests.yaml``, which name an in-cluster Service)
pointed at ``https://127.0.0.1:<port>`` instead, trusting the test CA, each webhook admitting only
the namespaces a test uses, so that other tests' objects never wait on it; or a release's own
configurations, already in the cluster, redirected the same way (:func:`redirect_patch`)."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml


def pointed_at_local(manifests: str, prefix: str, port: int, ca: Path,
                     namespaces: Sequence[str]) -> list[dict[str, Any]]:
    """The webhook configurations of ``manifests`` (YAML documents) named ``<prefix>-<upstream name>``,
    their clients sent to ``https://127.0.0.1:port`` with the path the Service had, trusting the PEM
    certificate at ``ca``, and admitting only objects in ``namespaces``."""
    bundle = base64.b64encode(ca.read_bytes()).decode()
    selector = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In",
                                      "values": list(namespaces)}]}
    out = []
    for doc in yaml.safe_load_all(manifests):
        if not doc:
            continue
        doc["metadata"] = {"name": f"{prefix}-{doc['metadata']['name']}"}
        for hook in doc["webhooks"]:
            service = hook["clientConfig"]["service"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{service['path']}", "caBundle": bundle}
            hook["namespaceSelector"] = selector
        out.append(doc)
    return out


def redirect_patch(configuration: dict[str, Any], port: int, ca_pem: bytes) -> list[dict[str, Any]]:
    """A JSON patch (RFC 6902 operations) sending every webhook of ``configuration`` (a Mutating or Validating
    WebhookConfiguration as the API server holds it) to ``https://127.0.0.1:port`` with the path its Service had,
    trusting the PEM ``ca_pem``: what a release's webhooks need when the controller serving them runs as a process
    on this machine rather than behind the release's Service, which no pod serves here. Each webhook's rules,
    selectors and failure policy stay the release's.

    Raises:
        KeyError: a webhook's client is not a Service (already redirected, or a URL of the release's own).
    """
    bundle = base64.b64encode(ca_pem).decode()
    return [{"op": "replace", "path": f"/webhooks/{i}/clientConfig",
             "value": {"url": f"https://127.0.0.1:{port}{hook['clientConfig']['service']['path']}",
                       "caBundle": bundle}}
            for i, hook in enumerate(configuration["webhooks"])]
