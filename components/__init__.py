"""Pulumi ComponentResources: cluster, add-ons and the per-job DistributedJob."""
