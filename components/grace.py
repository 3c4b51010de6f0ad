"""The pod's termination grace period, from the agent's: one rule for every backend and for the Trainer's
runtimes (``components.job.pod``, ``components.addons.trainer_runtime``)."""

from __future__ import annotations

import math

AGENT_STOP_MARGIN = 10
"""Seconds a stopping pod keeps beyond the agent's grace period: the agent's own SIGKILL of stragglers,
its verdict and report, and the kubelet's delivery of SIGTERM."""


def termination_grace_seconds(grace_period: float) -> int:
    """``terminationGracePeriodSeconds`` for an agent whose grace period is ``grace_period`` seconds: that,
    rounded up to whole seconds, plus :data:`AGENT_STOP_MARGIN`."""
    return math.ceil(grace_period) + AGENT_STOP_MARGIN
