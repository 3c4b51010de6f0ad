"""Ray on one machine: what each local node's ``ray start`` gets, so the nodes share the machine
instead of each claiming all of it. Standard library only."""

from __future__ import annotations

import os

RAY_OBJECT_STORE_SHARE = 0.3
"""Share of this machine's memory the local nodes' Ray object stores get together (Ray's own default
for one node), split evenly between them."""
RAY_MIN_OBJECT_STORE = 80 * 1024 * 1024
"""Smallest object store given to a local Ray node, bytes (Ray refuses less than 75 MiB)."""


def ray_defaults(workers: int) -> tuple[str, ...]:
    """``ray start`` arguments for ``workers`` local nodes sharing this machine: each gets its share
    of the CPUs and of the object store memory Ray would give one node on it (``RAY_OBJECT_STORE_SHARE``)."""
    args = [f"--num-cpus={max(1, (os.cpu_count() or 1) // workers)}"]
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return tuple(args)
    args.append(f"--object-store-memory={max(RAY_MIN_OBJECT_STORE, int(memory * RAY_OBJECT_STORE_SHARE) // workers)}")
    return tuple(args)
