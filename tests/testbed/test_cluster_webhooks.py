"""testbed.cluster.webhooks: a controller's generated webhook configurations pointed at its process on
loopback, named under its prefix, trusting the test CA, admitting only the tests' namespaces."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from testbed.cluster.webhooks import pointed_at_local

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
