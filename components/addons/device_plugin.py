"""``NvidiaDevicePlugin``: advertises ``nvidia.com/gpu`` on GPU nodes (Helm chart, pinned).

No ``from __future__ import annotations`` here: the ``trainplane`` package's schema is inferred from the
component's annotations at run time (``components.package``).
"""

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Union

import pulumi

from components import docs, validate
from components.addons.helm import helm_release
from components.addons.inputs import NvidiaDevicePluginArgsDict
from components.addons.versions import NVIDIA_DEVICE_PLUGIN
from components.arguments import args_from
from components.gpu import gpu_toleration
from components.tokens import aliased, token


@dataclass(frozen=True)
class NvidiaDevicePluginArgs:
    """Settings of the NVIDIA device plugin (fields documented by ``NvidiaDevicePluginArgsDict``).

    Raises:
        ArgumentError: ``namespace`` is not a DNS label.
    """

    namespace: str = "nvidia-device-plugin"
    """Namespace of the release."""

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


docs.document_fields(NvidiaDevicePluginArgs)

if TYPE_CHECKING:
    DevicePluginArgs = Optional[Union[NvidiaDevicePluginArgs, NvidiaDevicePluginArgsDict]]
else:
    DevicePluginArgs = NvidiaDevicePluginArgsDict  # the package schema is inferred from the TypedDict


class NvidiaDevicePlugin(pulumi.ComponentResource):
    """The NVIDIA device plugin DaemonSet, which advertises the GPUs of GPU nodes as ``nvidia.com/gpu``.

    Its pods run only on GPU nodes, which may not exist yet (node groups scaled to zero), so
    the release does not wait for them: ``pulumi up`` is never held until a timeout. The Helm release
    is the ``release`` attribute.
    """

    namespace: pulumi.Output[str]
    """The namespace of the release."""

    def __init__(
        self,
        name: str,
        args: DevicePluginArgs = None,
        opts: Optional[pulumi.ResourceOptions] = None,
    ) -> None:
        """Install the plugin; ``args`` is a ``NvidiaDevicePluginArgs``, a mapping of its fields, or
        ``None`` for the defaults.

        Raises:
            ArgumentError: an argument is invalid.
        """
        args = args_from(NvidiaDevicePluginArgs, args)
        super().__init__(token("NvidiaDevicePlugin"), name, None, aliased(opts, "trainplane:addons:NvidiaDevicePlugin"))
        self.release = helm_release(
            f"{name}-release",
            NVIDIA_DEVICE_PLUGIN,
            release_name="nvidia-device-plugin",
            namespace=args.namespace,
            parent=self,
            values=device_plugin_values(),
            skip_await=True,
        )
        self.namespace = pulumi.Output.from_input(args.namespace)
        self.register_outputs({"namespace": self.namespace, "status": self.release.status})


NvidiaDevicePlugin.__doc__ = inspect.cleandoc(NvidiaDevicePlugin.__doc__ or "")
