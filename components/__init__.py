"""Pulumi ComponentResources: cluster, add-ons and the per-job DistributedJob."""

from components.job import DistributedJob, DistributedJobArgs

__all__ = ["DistributedJob", "DistributedJobArgs"]
