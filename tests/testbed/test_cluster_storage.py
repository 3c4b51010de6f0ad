"""The test cluster's host-path provisioner as configured (``testbed/cluster/storage.py``): the controller
manager's flag and the StorageClass the cluster creates."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.cluster import commands, storage
from testbed.cluster.commands import Layout, Ports
from tests.components.schemacheck import validate_manifest

pytestmark = pytest.mark.unit


def test_the_controller_manager_provisions_host_path_claims() -> None:
    argv = commands.controller_manager(Path("/bin/kcm"), Layout(Path("/state")), Ports(1, 2, 3, 4, 5, 6))
    # k8s.io/kubernetes v1.34.4 cmd/kube-controller-manager/app/options/persistentvolumebindercontroller.go
    assert argv.count("--enable-hostpath-provisioner=true") == 1
    assert "--secure-port=4" in argv  # the rest of the command line is still there


def test_the_class_names_the_in_tree_provisioner_binds_at_once_and_is_not_the_default() -> None:
    body = storage.storage_class()
    validate_manifest(body)
    # pkg/volume/hostpath/host_path.go (v1.34.4): hostPathPluginName
    assert body["provisioner"] == "kubernetes.io/host-path"
    assert body["volumeBindingMode"] == "Immediate" and body["reclaimPolicy"] == "Delete"
    assert "annotations" not in body["metadata"]  # no storageclass.kubernetes.io/is-default-class
