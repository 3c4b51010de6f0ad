"""``runtime.distributed``: a torch process group kept for the world, outside the user's modules.

A service job's worker processes outlive their calls, edits and resizes, and so does torch's
default process group; the user's modules do not (hot reload imports a changed module again, its
globals empty). This module is where the group is held instead, so code asks for it on every call::

    from runtime import distributed

    def train(epochs):
        group = distributed.process_group()   # formed once per world generation, then the same
        if group.fresh:                        # a new world: rebuild what was built on the old group
            ...

:func:`process_group` is idempotent within a world generation and re-forms the group for a new one
(after a resize, or a node lost in an elastic job): it destroys the old group, then calls
``torch.distributed.init_process_group`` against the new world's ``MASTER_ADDR``/``MASTER_PORT``
with the same backend (``nccl`` when CUDA is there, else ``gloo``, unless given). Every ``env://``
rendezvous goes through a store kept for the generation (``runtime.agent.execution.torchhooks``),
so the user's own ``init_process_group()``/``destroy_process_group()`` on every call works too.
:func:`before_call` lets the service worker refuse a call on a group the user formed for an older
world (it would wait in a collective for ranks that now form another world).

Standard library only at import: torch is imported inside the functions, which only a user
process that uses torch calls.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Optional

from runtime.agent import contract
from runtime.agent.errors import ConfigError, StaleProcessGroup, WorkerMembershipChanged
from runtime.agent.execution import delivery, torchhooks

BACKENDS = ("gloo", "nccl")
"""Backends :func:`process_group` forms."""


@dataclass(frozen=True)
class Group:
    """The default process group as :func:`process_group` hands it out.

    Attributes:
        generation: the world generation it was formed for.
        rank: this process's rank in it.
        world_size: its size (processes).
        backend: ``"gloo"`` or ``"nccl"``.
        fresh: whether this call formed it (the first call in a generation); code that built
            something on the old group (a ``DistributedDataParallel``, a sampler) builds it again.
    """

    generation: int
    rank: int
    world_size: int
    backend: str
    fresh: bool


class _State:
    """This process's holder state (module level, outside every synced tree)."""

    backend: Optional[str] = None
    formed: Optional[int] = None
    """Generation the holder formed (or adopted) the current default group for."""


_KEPT: dict[str, dict[str, Any]] = {}


def kept(name: str) -> dict[str, Any]:
    """This process's dict called ``name``, kept outside every synced tree: what a call puts there
    (a model, an optimiser, an epoch count) is there at the next call, after an edit of the
    caller's modules too (hot reload empties the globals of a changed module, never this). An
    object whose class is defined in an edited module keeps its old class.

    Args:
        name: any string; the same name gives the same dict in this process.

    Raises:
        ConfigError: ``name`` is not a non-empty string.
    """
    if not isinstance(name, str) or not name:
        raise ConfigError(f"name={name!r} is invalid: name the kept state with a non-empty string")
    return _KEPT.setdefault(name, {})


def generation() -> int:
    """The world generation this process's environment describes (``TRAINPLANE_GENERATION``; 0
    outside a trainplane job)."""
    return torchhooks.generation()


def process_group(backend: Optional[str] = None, timeout: Optional[float] = None) -> Group:
    """The default process group for this process's current world; forms it when needed.

    Applies a pending membership change first (``runtime.membership.poll``). Within one generation
    every call returns the same group (``fresh`` False after the first); in a new generation the
    old group is destroyed and a new one formed with the new world's ``RANK``, ``WORLD_SIZE``,
    ``MASTER_ADDR`` and ``MASTER_PORT``, every rank of the new world meeting there. A group the
    user formed with ``init_process_group`` in this generation is adopted as it is.

    Args:
        backend: ``"gloo"`` or ``"nccl"``; default: the backend used before in this process, else
            ``"nccl"`` when CUDA is available, else ``"gloo"``. With ``nccl`` the process's device is
            set to ``cuda:LOCAL_RANK`` first.
        timeout: seconds a collective (and the rendezvous) may wait for a peer; default torch's.

    Returns:
        The group's :class:`Group`.

    Raises:
        ConfigError: ``backend`` is not one of :data:`BACKENDS`, differs from the group's backend
            within a generation, or ``timeout`` is not positive.
        RuntimeError, ValueError: torch could not form the group (e.g. a peer never came).
    """
    if backend is not None and backend not in BACKENDS:
        raise ConfigError(f"backend={backend!r} is invalid: use one of {', '.join(BACKENDS)}")
    if timeout is not None and not timeout > 0:
        raise ConfigError(f"timeout={timeout!r} is invalid: use seconds > 0, or None for torch's default")
    delivery.poll()
    import torch
    import torch.distributed as dist

    torchhooks.install()
    current = generation()
    if dist.is_initialized() and current in (_State.formed, torchhooks.rendezvous_generation()):
        have = str(dist.get_backend())
        if backend is not None and backend != have:
            raise ConfigError(f"backend={backend!r} is invalid: this generation's group is {have}; pass "
                              f"backend={have!r} or none")
        _State.backend = have
        fresh = _State.formed != current
        _State.formed = current
        return Group(current, dist.get_rank(), dist.get_world_size(), have, fresh)
    if dist.is_initialized():
        dist.destroy_process_group()
    chosen = backend or _State.backend or ("nccl" if torch.cuda.is_available() else "gloo")
    options: dict[str, Any] = {"backend": chosen, "init_method": "env://"}
    if timeout is not None:
        options["timeout"] = timedelta(seconds=timeout)
    if chosen == "nccl":
        device = torch.device("cuda", int(os.environ.get(contract.LOCAL_RANK, "0")))
        torch.cuda.set_device(device)
        options["device_id"] = device
    dist.init_process_group(**options)
    _State.backend, _State.formed = chosen, current
    return Group(current, dist.get_rank(), dist.get_world_size(), chosen, True)


def release() -> None:
    """Destroy the default process group, if any; the next :func:`process_group` forms it again.
    The kept store stays (the next rendezvous takes a fresh prefix in it)."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    _State.formed = None


def stale() -> Optional[int]:
    """The generation of the default group when the user's code formed it (``init_process_group``
    through ``env://``, not :func:`process_group`, which re-forms its own) for an older world than
    this process's, else ``None``. Never imports torch: a process that has not imported it has no
    group."""
    dist = sys.modules.get("torch.distributed")
    formed = torchhooks.rendezvous_generation()
    if dist is None or formed is None or formed >= generation() or _State.formed == formed:
        return None
    return formed if dist.is_initialized() else None


def before_call() -> None:
    """The service worker's hook before each call: route ``env://`` through the kept store, and
    refuse to run on a group of an older world.

    Raises:
        StaleProcessGroup: the user's code formed the default group for an older generation.
    """
    torchhooks.install()
    torchhooks.collect()
    formed = stale()
    if formed is not None:
        change = delivery.last() or WorkerMembershipChanged([], [], [], [], generation())
        raise StaleProcessGroup(formed, change)
