"""The workloads a ``DistributedJob`` renders its pods as (``DistributedJobArgs.backend``)."""

INDEXED_JOB = "indexed-job"
PYTORCHJOB = "pytorchjob"
STATEFULSET = "statefulset"
TRAINJOB = "trainjob"
BACKENDS = (INDEXED_JOB, PYTORCHJOB, STATEFULSET, TRAINJOB)
STATEFULSET_HASH_SUFFIX = 11
"""A StatefulSet's pods carry ``controller-revision-hash: <name>-<hash of up to 10 characters>``, a
63-character label: the name takes at most 52."""
