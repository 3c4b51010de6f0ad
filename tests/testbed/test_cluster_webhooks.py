"""testbed.cluster.webhooks: a controller's generated webhook configurations pointed at its process on
loopback, named under its prefix, trusting the test CA, admitting only the tests' namespaces."""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.cluster.webhooks import pointed_at_local, redirect_patch

pytestmark = pytest.mark.unit

MANIFESTS = """
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mutating-webhook-configuration
webhooks:
- name: mjob.kb.io
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate-batch-v1-job}
  rules: []
- name: mpod.kb.io
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}
  rules: []
---
"""


def test_each_webhook_goes_to_the_local_port_with_its_path_and_only_the_tests_namespaces(tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_bytes(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    [config] = pointed_at_local(MANIFESTS, "kueue", 9443, ca, ["t-1", "t-2"])
    assert config["metadata"] == {"name": "kueue-mutating-webhook-configuration"}
    assert [hook["clientConfig"]["url"] for hook in config["webhooks"]] == [
        "https://127.0.0.1:9443/mutate-batch-v1-job", "https://127.0.0.1:9443/mutate--v1-pod"]
    assert {base64.b64decode(hook["clientConfig"]["caBundle"]) for hook in config["webhooks"]} == {ca.read_bytes()}
    assert {str(hook["namespaceSelector"]) for hook in config["webhooks"]} == {str({"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["t-1", "t-2"]}]})}


def replaced(document: dict[str, Any], operations: list[dict[str, Any]]) -> dict[str, Any]:
    """``document`` with RFC 6902 ``replace`` operations applied (each must be one; list indices as digits)."""
    out = copy.deepcopy(document)
    for operation in operations:
        assert operation["op"] == "replace"
        *parents, last = operation["path"].strip("/").split("/")
        node: Any = out
        for step in parents:
            node = node[int(step)] if isinstance(node, list) else node[step]
        node[int(last) if isinstance(node, list) else last] = operation["value"]
    return out


def test_a_releases_own_configuration_is_redirected_in_place_its_rules_and_selectors_kept() -> None:
    [stored] = [d for d in yaml.safe_load_all(MANIFESTS) if d]
    stored["webhooks"][0]["namespaceSelector"] = {"matchLabels": {"team": "a"}}
    ca = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    patched = replaced(stored, redirect_patch(stored, 9443, ca))
    assert [hook["clientConfig"] for hook in patched["webhooks"]] == [
        {"url": f"https://127.0.0.1:9443{path}", "caBundle": base64.b64encode(ca).decode()}
        for path in ("/mutate-batch-v1-job", "/mutate--v1-pod")]
    assert patched["metadata"] == stored["metadata"] and patched["webhooks"][0]["namespaceSelector"] == {
        "matchLabels": {"team": "a"}}
    assert [hook["rules"] for hook in patched["webhooks"]] == [[], []]
    with pytest.raises(KeyError):
        redirect_patch(patched, 9443, ca)
