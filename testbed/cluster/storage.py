"""The test cluster's one dynamic provisioner: kube-controller-manager's own host-path provisioner.

``--enable-hostpath-provisioner`` (k8s.io/kubernetes v1.34.4 ``cmd/kube-controller-manager/app/options/
persistentvolumebindercontroller.go``; the plugin is ``pkg/volume/hostpath/host_path.go``) makes the
PersistentVolume controller provision every claim of a StorageClass whose provisioner is
:data:`PROVISIONER`: it creates the directory ``/tmp/hostpath_pv/<uuid>`` on this machine and a ``hostPath``
PersistentVolume for it with the claim's own access modes and size, and its deleter removes the directory when
the volume is released (reclaim policy ``Delete``). The flag alone changes nothing: only a claim naming the
class :data:`CLASS` is provisioned, and the class is not the default, so a claim without a class stays as
before.

What the volumes are good for here: every process of the cluster runs on this one machine, so the real node's
kubelet (``realnode.py``) mounts the same directory into every pod that mounts the claim, which makes a
``ReadWriteMany`` claim really shared by all of that node's pods; on the kwok nodes nothing mounts anything.
Upstream calls it "for testing and development only" and "won't work in a multi-node cluster": that is what it
is used for.
"""

from __future__ import annotations

from typing import Any

PROVISIONER = "kubernetes.io/host-path"
"""The in-tree plugin's provisioner name (``pkg/volume/hostpath``: ``hostPathPluginName``)."""

CLASS = "hostpath"
"""The StorageClass the cluster offers (not the default class)."""

ROOT = "/tmp/hostpath_pv"  # noqa: S108 - the provisioner's own fixed directory, not a temp file of ours
"""Where the provisioner creates each volume's directory (``hostPathProvisioner.Provision``: ``/tmp/<basePath>``,
``basePath`` ``hostpath_pv``)."""

CONTROLLER_MANAGER_FLAGS = ("--enable-hostpath-provisioner=true",)
"""What kube-controller-manager needs for it (``commands.controller_manager``)."""


def storage_class() -> dict[str, Any]:
    """The StorageClass :data:`CLASS`: :data:`PROVISIONER`, claims bound at once (``Immediate``, the only mode
    the in-tree provisioner needs no node for), volumes deleted with their claim."""
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": CLASS, "labels": {"app.kubernetes.io/part-of": "trainplane-testbed"}},
            "provisioner": PROVISIONER, "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate"}


def install(api: Any) -> None:
    """Create :func:`storage_class` with ``api`` (a ``kubernetes.client.ApiClient`` of the admin)."""
    from kubernetes import client

    client.StorageV1Api(api).create_storage_class(storage_class())
