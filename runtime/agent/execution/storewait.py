"""A rank other than 0 waits in Python for rank 0's store to listen before torch's client first connects.

With ``env://`` (or ``tcp://``) and no agent store (``TORCHELASTIC_USE_AGENT_STORE`` False, as here), rank 0 makes
the job's ``TCPStore`` inside its ``init_process_group`` and every other rank connects to it there
(``torch/distributed/rendezvous.py``, ``_create_c10d_store``, torch 2.13). A client refused because rank 0 has not
got that far tries again only after a back-off: a store that listened 50 ms after the client's first try was
reached 370 to 520 ms after it (measured here, torch 2.13 on loopback). Every rank starts at once, so about half of
all starts met that, and the group formed that much later than rank 0 was ready.

Here, in a batch job's rank other than 0, ``_create_c10d_store`` first polls ``host:port`` with plain connections
(:data:`FAST` apart for :data:`FAST_FOR` s, then :data:`SLOW` apart) until one is accepted, and then lets torch
connect, at once. Nothing is held and nothing is bound: the poll's connections are closed as soon as they are
made (rank 0's store accepts and drops them), and rank 0, the store's own ``TCPStore(..., is_master=True)`` and
every other use of ``MASTER_PORT`` are untouched. A store that never comes fails as torch's would, with
``DistStoreError``, after the same timeout.

Standard library only at import: torch is never imported here (:func:`install` attaches on its import).
"""

from __future__ import annotations

import socket
import sys
import time
import types
from datetime import timedelta
from typing import Any, Callable, Optional

from runtime.agent import contract
from runtime.agent.execution import onimport

RENDEZVOUS_MODULE = "torch.distributed.rendezvous"
"""torch's module of rendezvous handlers, whose ``_create_c10d_store`` makes every rank's store."""
FAST = 0.005
"""Seconds between two tries while rank 0 is expected any moment."""
FAST_FOR = 2.0
"""Seconds of tries :data:`FAST` apart; then :data:`SLOW` apart."""
SLOW = 0.1
"""Seconds between two tries once rank 0 is late (a slow import, a node still starting)."""

Clock = Callable[[], float]
Sleep = Callable[[float], None]
Connect = Callable[[tuple[str, int], float], None]


def _connect(address: tuple[str, int], timeout: float) -> None:
    socket.create_connection(address, timeout=timeout).close()


def wait_for_store(host: str, port: int, timeout: float, clock: Clock = time.monotonic, sleep: Sleep = time.sleep,
                   connect: Connect = _connect) -> Optional[OSError]:
    """Wait until ``host:port`` accepts a TCP connection, for at most ``timeout`` seconds.

    Args:
        host: a name, an IPv4 or an IPv6 address (brackets allowed).
        port: the store's port.
        timeout: seconds.
        clock, sleep, connect: seams for tests (``time.monotonic``, ``time.sleep``, a connection opened and
            closed).

    Returns:
        ``None`` once a connection was accepted; the last error when ``timeout`` ran out first.
    """
    start = clock()
    while True:
        elapsed = clock() - start
        try:
            connect((host.strip("[]"), port), max(FAST, min(1.0, timeout - elapsed)))
            return None
        except OSError as exc:
            if elapsed >= timeout:
                return exc
            sleep(FAST if elapsed < FAST_FOR else SLOW)


def reach_store(hostname: str, port: int, rank: int, timeout: timedelta) -> None:
    """For a ``rank`` other than 0, :func:`wait_for_store` on ``hostname:port``; nothing for rank 0.

    Raises:
        torch.distributed.DistStoreError: the store did not accept a connection within ``timeout`` (naming the
            rank, the address, the variables that set it and the last error).
    """
    if rank == 0:
        return
    failed = wait_for_store(hostname, port, timeout.total_seconds())
    if failed is not None:
        from torch.distributed import DistStoreError

        raise DistStoreError(f"rank {rank} could not reach rank 0's store at {hostname}:{port} "
                             f"({contract.MASTER_ADDR}, {contract.MASTER_PORT}) within {timeout}: {failed}")


def _patch(module: types.ModuleType) -> None:
    original = module._create_c10d_store
    if getattr(original, "_trainplane", False):
        return

    def _create_c10d_store(hostname: str, port: int, rank: int, world_size: int, timeout: timedelta,
                           *args: Any, **kwargs: Any) -> Any:
        if not module._torchelastic_use_agent_store():
            reach_store(hostname, port, rank, timeout)
        return original(hostname, port, rank, world_size, timeout, *args, **kwargs)

    _create_c10d_store.__doc__ = original.__doc__
    _create_c10d_store.__wrapped__ = original  # type: ignore[attr-defined]
    _create_c10d_store._trainplane = True  # type: ignore[attr-defined]
    setattr(module, "_create_c10d_store", _create_c10d_store)  # noqa: B010 (a module attribute mypy cannot see)


def install() -> None:
    """Wrap torch's ``_create_c10d_store`` now, if torch's rendezvous module is loaded, else on its import (the rank
    bootstrap calls this first thing). Never imports torch."""
    loaded = sys.modules.get(RENDEZVOUS_MODULE)
    if loaded is not None:
        _patch(loaded)
    else:
        onimport.on_import(RENDEZVOUS_MODULE, __name__, _patch)
