"""The job's verdict file (local mode): the launcher's exit code comes from it, so it must not depend
on which agent writes last. Standard library only (Unix: ``fcntl``).

Every agent that learns the job's verdict records it; under an exclusive ``flock`` of a lock file
beside it, a verdict replaces the one held only if its world is not older (``World.order``: epoch,
then generation). So a coordinator fenced out of the job, which may still decide a verdict of its
old world from reports it reads only after a stall of its own, never overrides the verdict of the
world that replaced it, whichever of the two is written first.
"""

from __future__ import annotations

import fcntl
import json
import os
from typing import Optional

from runtime.agent.world import World


def held_order(path: str) -> Optional[tuple[int, int]]:
    """The ``(epoch, generation)`` of the verdict held at ``path``, or ``None`` when there is none
    (no file, or not a verdict this module wrote)."""
    try:
        with open(path) as f:
            held = json.load(f)
        return int(held["epoch"]), int(held["generation"])
    except (OSError, ValueError, TypeError, KeyError):
        return None


def record(path: str, world: World, writer: int) -> bool:
    """Record ``world``'s verdict (``World.verdict``, with its epoch and generation) at ``path``,
    unless the file holds one of a newer world.

    Args:
        path: the verdict file.
        world: a world with a terminal status.
        writer: this node's id (names its temporary file).

    Returns:
        Whether this verdict is now the one held.

    Raises:
        OSError: the file or its lock cannot be written.
    """
    with open(f"{path}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        held = held_order(path)
        if held is not None and held > world.order:
            return False
        tmp = f"{path}.{writer}.tmp"
        with open(tmp, "w") as f:
            json.dump({**world.verdict(), "epoch": world.epoch, "generation": world.generation}, f)
        os.replace(tmp, path)
        return True
