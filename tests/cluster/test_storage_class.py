"""The test cluster's host-path StorageClass against the real controller manager (``testbed/cluster/storage.py``):
a claim of the class binds to a directory of this machine, which goes with the claim; a claim without a class
stays Pending, as it did before the cluster had a provisioner."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client

from testbed.cluster import storage
from testbed.cluster.waiting import wait_for

pytestmark = pytest.mark.cluster

BIND = 60.0
"""Seconds a claim may take to bind (the PV controller's resync is 15 s)."""


def claim(name: str, storage_class: str | None) -> dict[str, object]:
    spec: dict[str, object] = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    return {"metadata": {"name": name}, "spec": spec}


def test_a_claim_of_the_host_path_class_binds_to_a_directory_that_goes_with_it(
        api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_persistent_volume_claim(namespace, claim("data", storage.CLASS))
    core.create_namespaced_persistent_volume_claim(namespace, claim("plain", None))
    bound = wait_for(lambda: core.read_namespaced_persistent_volume_claim("data", namespace).status.phase == "Bound"
                     and core.read_namespaced_persistent_volume_claim("data", namespace), BIND, "claim data to bind")
    volume = core.read_persistent_volume(bound.spec.volume_name)
    assert volume.spec.access_modes == ["ReadWriteMany"] and volume.spec.capacity == {"storage": "1Gi"}
    directory = Path(volume.spec.host_path.path)
    assert directory.parent == Path(storage.ROOT) and directory.is_dir()
    assert core.read_namespaced_persistent_volume_claim("plain", namespace).status.phase == "Pending"
    core.delete_namespaced_persistent_volume_claim("data", namespace)
    wait_for(lambda: not directory.exists(), BIND, f"the volume's directory {directory} to go with its claim")
