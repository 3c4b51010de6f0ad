"""The add-ons a stack installs, as parsed from its config."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from components.addons import KueueArgs, NvidiaDevicePluginArgs, TrainerV2Args, TrainingOperatorArgs, VolcanoArgs


@dataclass(frozen=True)
class AddonsConfig:
    """The add-ons to install; None means not installed."""

    device_plugin: Optional[NvidiaDevicePluginArgs] = None
    training_operator: Optional[TrainingOperatorArgs] = None
    volcano: Optional[VolcanoArgs] = None
    kueue: Optional[KueueArgs] = None
    trainer: Optional[TrainerV2Args] = None
