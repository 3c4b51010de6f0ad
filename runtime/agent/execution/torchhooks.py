"""What a service worker process changes in torch.distributed so that a group can be formed and
destroyed call after call in the same process (Kubetorch's pattern: ``init_process_group()`` at the
start of every call, ``destroy_process_group()`` at its end), as it can under torchrun.

Two faults of torch 2.13 (``torch/distributed/rendezvous.py``, ``distributed_c10d.py``) make that
pattern hang in a long-lived process whose rank 0 hosts the store (``TORCHELASTIC_USE_AGENT_STORE``
False, as here: no agent hosts one):

1. ``env://`` makes a new ``TCPStore`` for every ``init_process_group``, rank 0 hosting it on
   ``MASTER_PORT`` with ``multi_tenant=True``; ``destroy_process_group`` does not wait for that
   server to stop, so the next round, on the same port, may meet the previous round's server, whose
   keys sit under the same ``default_pg/0/`` prefix (destroy resets the group counter): ranks read
   the previous round's gloo addresses and wait forever. Here every ``env://`` rendezvous of the
   process goes through :func:`_env_rendezvous`: one store per world generation, kept, and a fresh
   key prefix ``trainplane/<n>/`` per rendezvous (``n``: that rank's rendezvous count in the store).
2. The last reference to a destroyed gloo group, dropped when the user's frame ends (the
   ``DistributedDataParallel`` in a local variable), runs ``~ProcessGroupGloo`` holding the GIL;
   it joins the group's work threads, one of which may still be destroying its last work item,
   whose thread-local state needs the GIL (seen with gdb: ``Reducer::~Reducer`` ->
   ``ProcessGroupGloo::~ProcessGroupGloo`` -> ``thread::join`` against ``AsyncWork::~AsyncWork``
   -> ``gil_scoped_acquire``; pytorch/pytorch#56297). Here ``destroy_process_group`` keeps the
   groups it destroys alive (:func:`_destroy`) until the next call starts (:func:`collect`), when
   those threads have long been idle.

The ranks of an elastic batch job (``TRAINPLANE_JOIN_TIMEOUT`` set, :func:`install_on_import` with
``destroy=False``) take the same ``env://`` path for a third reason: a node that joins a running world starts
its processes cold (the interpreter, ``import torch``, the user's set-up) while the survivors re-initialise at
once, and torch's store lets rank 0 wait for the others only as long as the ``init_process_group`` timeout
(often seconds in elastic code, so that a lost peer is noticed). Here every rank first meets the others
(:func:`_meet`): up to ``TRAINPLANE_JOIN_TIMEOUT`` seconds, polling the store from Python, where the next
membership change can be raised in the main thread (a joiner lost before it arrived: the next world's
rendezvous starts instead); the user's timeout applies from there on.

In both, a third fault of torch 2.13 splits a world whose ranks did not all leave the previous one alike:
``init_process_group`` names the default group from torch's group counter (``_world.group_count``, the
``<count>`` of every gloo key's ``default_pg/<count>/``), incrementing it before the rendezvous, and only
``destroy_process_group`` of a formed group puts it back to 0. A rank whose ``init_process_group`` failed or
was left (a membership change raised inside its rendezvous, a store that never came) named its next group
``1`` while the others named theirs ``0``, each waiting for the other's keys until the timeout (issue 22: a
replacement joined while a survivor's rank was still in its re-formation's rendezvous; that rank waited for
``/trainplane/1//default_pg/1//cpu//0/0``, the others for ``.../default_pg/0//cpu//0/1``). Here
``init_process_group`` puts the counter back to 0 while no group is formed (:func:`_patch_init`).

Standard library only at import: torch is never imported here; the hooks attach when the user's
code imports torch's modules (:func:`install_on_import`).
"""

from __future__ import annotations

import os
import sys
import time
import types
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Iterator, Optional
from urllib.parse import parse_qsl, urlparse

from runtime.agent import contract
from runtime.agent.execution import onimport, storewait

RENDEZVOUS_MODULE = "torch.distributed.rendezvous"
"""torch's module of rendezvous handlers (``_rendezvous_handlers``, by URL scheme)."""
C10D_MODULE = "torch.distributed.distributed_c10d"
"""torch's module of ``init_process_group`` and ``destroy_process_group``."""
PREFIX = "trainplane"
"""Key prefix of every rendezvous made through the kept store."""
STEP = 1.0
"""The longest pause (s) between two polls while the ranks of a new world meet (:func:`_meet`)."""


@dataclass
class _Store:
    """The store kept for one generation: its endpoint, and the torch ``TCPStore``."""

    generation: int
    endpoint: tuple[str, int]
    store: Any


class _State:
    """This process's hook state (module level, outside every synced tree)."""

    store: Optional[_Store] = None
    rendezvous_generation: Optional[int] = None
    """Generation of the newest ``env://`` rendezvous made through the kept store."""
    destroyed: list[Any] = []
    """Groups destroyed since the current call started, kept alive until the next one."""


def generation() -> int:
    """The world generation this process's environment describes (``TRAINPLANE_GENERATION``)."""
    return int(os.environ.get(contract.TRAINPLANE_GENERATION, "0"))


def rendezvous_generation() -> Optional[int]:
    """The generation of the newest ``env://`` rendezvous of this process, or ``None`` (none yet)."""
    return _State.rendezvous_generation


def collect() -> None:
    """Let the groups destroyed during earlier calls go (the worker calls this before each call)."""
    _State.destroyed.clear()


def install(destroy: bool = True) -> bool:
    """Attach the hooks to torch's modules that are loaded (idempotent): the ``env://`` handler, the
    ``init_process_group`` that names every world's default group alike (:func:`_patch_init`), and with
    ``destroy`` the ``destroy_process_group`` that keeps groups alive until :func:`collect`; ``False`` when
    torch's rendezvous module is not loaded (nothing to do yet). Never imports torch."""
    module = sys.modules.get(RENDEZVOUS_MODULE)
    if module is None:
        return False
    handlers = module._rendezvous_handlers
    if handlers.get("env") is not _env_rendezvous:
        handlers["env"] = _env_rendezvous
    c10d = sys.modules.get(C10D_MODULE)
    if c10d is not None and hasattr(c10d, "destroy_process_group"):  # not while it is being imported
        _patch_c10d(c10d, destroy)
    return True


def install_on_import(destroy: bool = True) -> None:
    """:func:`install` now for what is loaded, and for the rest as soon as it is (the service worker
    calls this at its start, so the process's first ``init_process_group`` is hooked too; the bootstrap
    of an elastic batch job's rank with ``destroy=False``: it never calls :func:`collect`)."""
    install(destroy)
    for name in (RENDEZVOUS_MODULE, C10D_MODULE):
        onimport.on_import(name, __name__, lambda module: _after_import(module, destroy))


def _after_import(module: types.ModuleType, destroy: bool) -> None:
    if module.__name__ == C10D_MODULE:
        _patch_c10d(module, destroy)
    else:
        install(destroy)


def _patch_c10d(c10d: types.ModuleType, destroy: bool) -> None:
    _patch_init(c10d)
    if destroy:
        _patch_destroy(c10d)


def _patch_init(c10d: types.ModuleType) -> None:
    """``init_process_group`` that first puts torch's group counter back to 0 when no group is formed (the
    module's third fault), so that every rank of a world names its default group ``0``."""
    original = c10d.init_process_group
    if getattr(original, "_trainplane", False):
        return

    def init_process_group(*args: Any, **kwargs: Any) -> None:
        if not c10d.is_initialized():
            c10d._world.group_count = 0
        original(*args, **kwargs)

    _replace(c10d, "init_process_group", original, init_process_group)


def _replace(c10d: types.ModuleType, name: str, original: Callable[..., None], hook: Callable[..., None]) -> None:
    """Put ``hook`` in place of torch's function ``name`` in its module and in ``torch.distributed``."""
    hook.__doc__ = original.__doc__
    hook.__wrapped__ = original  # type: ignore[attr-defined]
    hook._trainplane = True  # type: ignore[attr-defined]
    setattr(c10d, name, hook)
    package = sys.modules.get("torch.distributed")
    if package is not None and getattr(package, name, None) is original:
        setattr(package, name, hook)


def _patch_destroy(c10d: types.ModuleType) -> None:
    original = c10d.destroy_process_group
    if getattr(original, "_trainplane", False):
        return

    def destroy_process_group(group: Any = None) -> None:
        world = c10d.GroupMember.WORLD
        doomed = list(c10d._world.pg_map) if group is None or group is world else [group]
        original(group)
        _State.destroyed.extend(pg for pg in doomed if pg is not None)

    _replace(c10d, "destroy_process_group", original, destroy_process_group)


def _env_rendezvous(url: str, timeout: Optional[timedelta] = None, **_: Any) -> Iterator[tuple[Any, int, int]]:
    """torch's ``env://`` handler, on the kept store with a fresh prefix (see the module).

    Raises:
        ValueError: a variable the rendezvous needs is not set (torch's own message).
    """
    from torch.distributed import PrefixStore

    query = dict(parse_qsl(urlparse(url).query))
    rank = int(query.get("rank", _required(contract.RANK)))
    world_size = int(query.get("world_size", _required(contract.WORLD_SIZE)))
    endpoint = (_required(contract.MASTER_ADDR), int(_required(contract.MASTER_PORT)))
    use_libuv = query.get("use_libuv", os.environ.get("USE_LIBUV", "1")) == "1"
    store = _kept_store(endpoint, rank, world_size, timeout, use_libuv)
    round_ = store.add(f"{PREFIX}/rendezvous/{rank}", 1)
    _State.rendezvous_generation = generation()
    yield PrefixStore(f"{PREFIX}/{round_}/", store), rank, world_size
    raise RuntimeError("Unable to perform re-rendezvous using env:// method")


def _kept_store(endpoint: tuple[str, int], rank: int, world_size: int, timeout: Optional[timedelta],
                use_libuv: bool) -> Any:
    """This generation's store, made on first use (rank 0 hosts it, as torch's ``env://`` does)."""
    from torch.distributed import TCPStore

    kept = _State.store
    current = generation()
    if kept is not None and kept.generation == current and kept.endpoint == endpoint:
        return kept.store
    _State.store = None  # the old generation's store goes (its server, on rank 0, with it)
    join = os.environ.get(contract.JOIN_TIMEOUT)
    if join:
        store = _meet(endpoint, rank, world_size, timeout, use_libuv, float(join))
    else:
        from torch.distributed.constants import default_pg_timeout

        storewait.reach_store(endpoint[0], endpoint[1], rank, world_size, timeout or default_pg_timeout)
        options: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        store = TCPStore(host_name=endpoint[0], port=endpoint[1], world_size=world_size, is_master=rank == 0,
                         multi_tenant=True, use_libuv=use_libuv, **options)
    _State.store = _Store(current, endpoint, store)
    return store


def _meet(endpoint: tuple[str, int], rank: int, world_size: int, timeout: Optional[timedelta], use_libuv: bool,
          join: float) -> Any:
    """This generation's store once all ``world_size`` ranks have reached it (see the module), waiting up to
    ``join`` seconds (or the user's ``timeout``, if longer) in Python, polling rank 0's port as ``storewait`` does,
    then the arrivals every :data:`STEP` s at most, so a membership change can be raised meanwhile; the store's
    timeout is the user's (torch's default without one).

    Raises:
        torch.distributed.DistStoreError: the store did not answer, or the others did not all arrive in time
            (how many did, named).
    """
    from torch.distributed import DistStoreError, TCPStore
    from torch.distributed.constants import default_pg_timeout

    user = timeout if timeout is not None else default_pg_timeout
    deadline = time.monotonic() + max(join, user.total_seconds())
    where = f"{endpoint[0]}:{endpoint[1]} (generation {generation()})"
    if rank != 0:  # rank 0 may be the late one: connect once its store listens
        failed = storewait.wait_for_store(endpoint[0], endpoint[1], deadline - time.monotonic(), world_size)
        if failed is not None:
            raise DistStoreError(f"rank {rank} could not reach the store of its world at {where} within "
                                 f"{contract.JOIN_TIMEOUT}={join:g} s: {failed}") from None
    store = TCPStore(host_name=endpoint[0], port=endpoint[1], world_size=world_size, is_master=rank == 0,
                     multi_tenant=True, use_libuv=use_libuv, timeout=user, wait_for_workers=False)
    arrived, met = f"{PREFIX}/arrived", f"{PREFIX}/met"
    if store.add(arrived, 1) == world_size:
        store.set(met, "1")
    pause = _pauses()
    while not store.check([met]):
        if time.monotonic() >= deadline:
            raise DistStoreError(f"{store.add(arrived, 0)} of the {world_size} ranks of its world reached the store "
                                 f"at {where} within {contract.JOIN_TIMEOUT}={join:g} s")
        time.sleep(next(pause))
    return store


def _pauses() -> Iterator[float]:
    """Seconds between two polls: from 10 ms, doubling up to :data:`STEP`."""
    pause = 0.01
    while True:
        yield pause
        pause = min(STEP, pause * 2)


def _required(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise ValueError(f"Error initializing torch.distributed using env:// rendezvous: environment variable "
                         f"{name} expected, but not set")
    return value
