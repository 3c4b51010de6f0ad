"""Add-on components; each installs what its custom resources need before creating them."""

from components.addons.device_plugin import NvidiaDevicePlugin, NvidiaDevicePluginArgs
from components.addons.kueue import ClusterQueueArgs, Kueue, KueueArgs, LocalQueueArgs, ResourceFlavorArgs
from components.addons.trainer import TrainerV2, TrainerV2Args
from components.addons.training_operator import TrainingOperator, TrainingOperatorArgs
from components.addons.volcano import Volcano, VolcanoArgs

__all__ = [
    "ClusterQueueArgs",
    "Kueue",
    "KueueArgs",
    "LocalQueueArgs",
    "NvidiaDevicePlugin",
    "NvidiaDevicePluginArgs",
    "ResourceFlavorArgs",
    "TrainerV2",
    "TrainerV2Args",
    "TrainingOperator",
    "TrainingOperatorArgs",
    "Volcano",
    "VolcanoArgs",
]
