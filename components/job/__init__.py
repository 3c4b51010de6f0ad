"""The per-job component: ``DistributedJob`` and the pure builders behind it."""

from components.job.args import DistributedJobArgs
from components.job.component import DistributedJob

__all__ = ["DistributedJob", "DistributedJobArgs"]
