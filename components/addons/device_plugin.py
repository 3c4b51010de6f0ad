"""``NvidiaDevicePlugin``: advertises ``nvidia.com/gpu`` on GPU nodes (Helm chart, pinned).

No ``from __future__ import annotations`` here: the ``trainplane`` package's schema is inferred from the
component's annotations at run time (``components.package``).
"""

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Union

import pulumi

from components import docs, validate
from components.addons.helm import helm_release, local_chart
from components.addons.inputs import NvidiaDevicePluginArgsDict
from components.addons.versions import NVIDIA_DEVICE_PLUGIN
from components.arguments import args_from
from components.gpu import gpu_toleration
from components.tokens import aliased, token


@dataclass(frozen=True)
class NvidiaDevicePluginArgs:
    """Settings of the NVIDIA device plugin (fields documented by ``NvidiaDevicePluginArgsDict``).

    Raises:
        ArgumentError: ``namespace`` is not a DNS label or ``chart_path`` holds no copy of the pinned chart.
    """

    namespace: str = "nvidia-device-plugin"
    """Namespace of the release."""
    chart_path: Optional[str] = None
    """A local directory (or ``.tgz``) of the nvidia-device-plugin 0.19.0 chart, installed instead of the chart from
    its repository (for a cluster behind a firewall); another chart or version is refused."""
    mofed_enabled: Optional[bool] = None
    """The plugin's ``--mofed-enabled`` (chart value ``mofedEnabled``); unset keeps its default, on since v0.19.0,
    which mounts every ``/dev/infiniband/uverbs*`` into GPU containers. ``false`` on EFA nodes, where the EFA device
    plugin hands out those devices (EKS User Guide ``latest/ug/ml/device-management-efa.adoc``; the EKS stack sets it
    when a GPU group has EFA)."""

    def __post_init__(self) -> None:
        validate.dns_label("namespace", self.namespace)
        if self.chart_path is not None:
            local_chart("chart_path", self.chart_path, NVIDIA_DEVICE_PLUGIN)
        if self.mofed_enabled is not None:
            validate.boolean("mofed_enabled", self.mofed_enabled)


def device_plugin_values(mofed_enabled: Optional[bool] = None) -> dict[str, Any]:
    """Chart values: tolerate the GPU taint the cluster components put on GPU nodes, and ``mofedEnabled`` when
    given (a top-level value of the chart, NVIDIA/k8s-device-plugin v0.19.0
    ``deployments/helm/nvidia-device-plugin/values.yaml``, passed to the plugin as ``MOFED_ENABLED``).

    The chart's default node affinity already selects ``nvidia.com/gpu.present=true`` nodes.
    """
    values: dict[str, Any] = {
        "tolerations": [
            gpu_toleration(),
            {"key": "CriticalAddonsOnly", "operator": "Exists"},
        ]
    }
    if mofed_enabled is not None:
        values["mofedEnabled"] = mofed_enabled
    return values


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
            values=device_plugin_values(args.mofed_enabled),
            skip_await=True,
            chart_path=args.chart_path,
        )
        self.namespace = pulumi.Output.from_input(args.namespace)
        self.register_outputs({"namespace": self.namespace, "status": self.release.status})


NvidiaDevicePlugin.__doc__ = inspect.cleandoc(NvidiaDevicePlugin.__doc__ or "")
