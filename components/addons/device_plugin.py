"""``NvidiaDevicePlugin``: advertises ``nvidia.com/gpu`` on GPU nodes (Helm chart, pinned)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import pulumi

from components import validate
from components.addons.helm import helm_release
from components.addons.versions import NVIDIA_DEVICE_PLUGIN
from components.gpu import gpu_toleration


@dataclass(frozen=True)
class NvidiaDevicePluginArgs:
    """Settings of the NVIDIA device plugin.

    Attributes:
        namespace: Namespace of the release.

    Raises:
        ArgumentError: ``namespace`` is not a DNS label.
    """

    namespace: str = "nvidia-device-plugin"

    def __post_init__(self) -> None:
        validate.dns_label("namespace", self.namespace)


def device_plugin_values() -> dict[str, Any]:
    """Chart values: tolerate the GPU taint the cluster components put on GPU nodes.

    The chart's default node affinity already selects ``nvidia.com/gpu.present=true`` nodes.
    """
    return {
        "tolerations": [
            gpu_toleration(),
            {"key": "CriticalAddonsOnly", "operator": "Exists"},
        ]
    }


class NvidiaDevicePlugin(pulumi.ComponentResource):
    """The NVIDIA device plugin DaemonSet.

    Its pods run only on GPU nodes, which may not exist yet (node groups scaled to zero), so
    the release does not wait for them: ``pulumi up`` is never held until a timeout.

    Attributes:
        release: The Helm release.
    """

    def __init__(
        self,
        name: str,
        args: Optional[NvidiaDevicePluginArgs] = None,
        opts: Optional[pulumi.ResourceOptions] = None,
    ) -> None:
        super().__init__("trainplane:addons:NvidiaDevicePlugin", name, None, opts)
        args = args or NvidiaDevicePluginArgs()
        self.release = helm_release(
            f"{name}-release",
            NVIDIA_DEVICE_PLUGIN,
            release_name="nvidia-device-plugin",
            namespace=args.namespace,
            parent=self,
            values=device_plugin_values(),
            skip_await=True,
        )
        self.register_outputs({"status": self.release.status})
