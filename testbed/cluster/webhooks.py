"""Admission webhook configurations of a controller run as a process beside the test cluster: the
release's generated configurations (``config/.../manifests.yaml``, which name an in-cluster Service)
pointed at ``https://127.0.0.1:<port>`` instead, trusting the test CA, each webhook admitting only
the namespaces a test uses, so that other tests' objects never wait on it."""

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
