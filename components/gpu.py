"""How pods reach the GPU nodes that the cluster components taint (names in ``runtime.agent.contract``)."""

from __future__ import annotations

from runtime.agent import contract


def gpu_toleration() -> dict[str, str]:
    """A fresh toleration of the ``nvidia.com/gpu`` taint, for GPU pods and the device plugin's DaemonSet.

    It tolerates the key with any value, so nodes tainted by other tools (``nvidia.com/gpu:NoSchedule``
    without a value) are covered too.
    """
    return {"key": contract.GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
