"""The kwok nodes the test cluster registers, shaped like the stacks' nodes.

Two CPU nodes, and two GPU nodes that advertise ``nvidia.com/gpu: 1`` and carry the taint and label
the EKS component gives its GPU node groups (``components/cluster/eks.py``: ``nvidia.com/gpu=true``
with ``NoSchedule``, ``nvidia.com/gpu.present=true``), so the scheduler places GPU pods only there and
CPU pods never there. kwok (``commands.kwok``) manages exactly the nodes annotated as below.
"""

from __future__ import annotations

from typing import Any

from runtime.agent import contract

KWOK_ANNOTATION = {"kwok.x-k8s.io/node": "fake"}
"""The annotation kwok's ``--manage-nodes-with-annotation-selector`` picks."""

CPU_NODES = ("cpu-0", "cpu-1")
GPU_NODES = ("gpu-0", "gpu-1")


def node(name: str, gpus: int = 0) -> dict[str, Any]:
    """The Node object for ``name``: 8 CPUs, 32 GiB, 110 pods; with ``gpus``, that many ``nvidia.com/gpu``
    plus the GPU taint and label."""
    resources = {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"}
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
              "type": "kwok"}
    spec: dict[str, Any] = {}
    if gpus:
        resources[contract.GPU_RESOURCE] = str(gpus)
        labels[contract.GPU_NODE_LABEL] = "true"
        spec["taints"] = [{"key": contract.GPU_TAINT_KEY, "value": "true", "effect": "NoSchedule"}]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": dict(KWOK_ANNOTATION)},
        "spec": spec,
        "status": {"capacity": resources, "allocatable": resources},
    }


def all_nodes() -> list[dict[str, Any]]:
    """Every node the cluster registers: the CPU nodes, then the GPU nodes (one GPU each)."""
    return [node(n) for n in CPU_NODES] + [node(n, gpus=1) for n in GPU_NODES]
