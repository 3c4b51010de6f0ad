"""A rank other than 0 waits in Python for rank 0's store to listen before torch's client first connects.

With ``env://`` (or ``tcp://``) and no agent store (``TORCHELASTIC_USE_AGENT_STORE`` False, as here), rank 0 makes
the job's ``TCPStore`` inside its ``init_process_group`` and every other rank connects to it there
(``torch/distributed/rendezvous.py``, ``_create_c10d_store``, torch 2.13). A client refused because rank 0 has not
got that far tries again only after a back-off: a store that listened 50 ms after the client's first try was
reached 370 to 520 ms after it (measured here, torch 2.13 on loopback). Every rank starts at once, so about half of
all starts met that, and the group formed that much later than rank 0 was ready.

Here, in a batch job's rank other than 0, ``_create_c10d_store`` first polls ``host:port`` with plain connections
until one is accepted, and then lets torch connect, at once. The pause between tries (:func:`pause`) starts at
:data:`FAST` and, so that a large world does not flood rank 0's host, grows with the world so that all its ranks
together try about :data:`HOST_TRIES` times a second; after :data:`FAST_FOR` s it is :data:`SLOW` or more, each pause
jittered. Nothing is held: an accepted connection is closed at once (rank 0's store accepts and drops it), and one
that met itself (a local port nothing listens on can be connected to from itself, the kernel picking the same port
as the source) is reset, leaving no ``TIME_WAIT`` on the port rank 0 is about to bind; rank 0, its own
``TCPStore(..., is_master=True)`` and every other use of ``MASTER_PORT`` are untouched. A store that never comes
fails as torch's own client does, with ``DistNetworkError``, after the same timeout (naming the rank, the address
and what to check). A port outside 1-65535, or a torch without that function, is left to torch as it is.

Standard library only at import: torch is never imported here (:func:`install` attaches on its import).
"""

from __future__ import annotations

import socket
import struct
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
"""Seconds between two tries of one rank while rank 0 is expected any moment, in a small world."""
FAST_FOR = 2.0
"""Seconds of fast tries; then :data:`SLOW` apart or more."""
SLOW = 0.1
"""Seconds between two tries of one rank once rank 0 is late (a slow import, a node still starting)."""
SLOWEST = 1.0
"""The longest pause, however large the world."""
HOST_TRIES = 2000.0
"""Tries a second that all the ranks of a world make together at most (a tenth of that after :data:`FAST_FOR`)."""

Clock = Callable[[], float]
Sleep = Callable[[float], None]
Connect = Callable[[tuple[str, int], float], None]


def _connect(address: tuple[str, int], timeout: float) -> None:
    """Open a connection to ``address`` and close it; a connection to itself is reset and refused."""
    with socket.create_connection(address, timeout=timeout) as conn:
        if conn.getsockname()[:2] == conn.getpeername()[:2]:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            raise ConnectionRefusedError(f"{address[0]}:{address[1]} reached only itself (nothing listens there)")


def pause(elapsed: float, world_size: int, jitter: float = 1.0) -> float:
    """Seconds before a rank's next try, ``elapsed`` s into its wait in a world of ``world_size`` ranks.

    Args:
        elapsed: seconds since the wait began.
        world_size: ranks in the world (each but rank 0 tries).
        jitter: a factor, 0.5 to 1.5 in use (spreads the ranks' tries).
    """
    share = max(1, world_size - 1) / HOST_TRIES
    base = max(FAST, share) if elapsed < FAST_FOR else max(SLOW, 10 * share)
    return min(SLOWEST, base) * jitter


def wait_for_store(host: str, port: int, timeout: float, world_size: int = 2, clock: Clock = time.monotonic,
                   sleep: Sleep = time.sleep, connect: Connect = _connect,
                   jitter: Optional[Callable[[], float]] = None) -> Optional[OSError]:
    """Wait until ``host:port`` accepts a TCP connection, for at most ``timeout`` seconds.

    Args:
        host: a name, an IPv4 or an IPv6 address (brackets allowed).
        port: the store's port.
        timeout: seconds.
        world_size: ranks in the world (:func:`pause`).
        clock, sleep, connect, jitter: seams for tests (``time.monotonic``, ``time.sleep``, a connection opened and
            closed, a factor from 0.5 to 1.5; ``None``: a uniform random one).

    Returns:
        ``None`` once a connection was accepted; the last error when ``timeout`` ran out first.
    """
    import random  # on the first wait only: every rank's start-up imports this module

    start = clock()
    while True:
        elapsed = clock() - start
        try:
            connect((host.strip("[]"), port), max(FAST, min(1.0, timeout - elapsed)))
            return None
        except OSError as exc:
            if elapsed >= timeout:
                return exc
            sleep(pause(elapsed, world_size, jitter() if jitter is not None else random.uniform(0.5, 1.5)))


def reach_store(hostname: str, port: int, rank: int, world_size: int, timeout: timedelta) -> None:
    """For a ``rank`` other than 0, :func:`wait_for_store` on ``hostname:port``; nothing for rank 0, or for a port
    outside 1-65535 (torch refuses it itself).

    Raises:
        torch.distributed.DistNetworkError: the store did not accept a connection within ``timeout`` (naming the
            rank, the address, the last error and what to check), as torch's own client raises.
    """
    if rank == 0 or not 0 < port < 1 << 16:
        return
    failed = wait_for_store(hostname, port, timeout.total_seconds(), world_size)
    if failed is not None:
        raise sys.modules["torch.distributed"].DistNetworkError(  # torch is loaded: its rendezvous called this
            f"rank {rank} could not reach rank 0's store at {hostname}:{port} within {timeout}: {failed}; check "
            f"that rank 0 runs and has reached init_process_group, and that this address (init_method's, or "
            f"{contract.MASTER_ADDR} and {contract.MASTER_PORT}) reaches rank 0's node from this one")


def _patch(module: types.ModuleType) -> None:
    original = getattr(module, "_create_c10d_store", None)
    if original is None or getattr(original, "_trainplane", False):
        return
    agent_store = getattr(module, "_torchelastic_use_agent_store", lambda: False)

    def _create_c10d_store(hostname: str, port: int, rank: int, world_size: int, timeout: timedelta,
                           *args: Any, **kwargs: Any) -> Any:
        if not agent_store():
            reach_store(hostname, port, rank, world_size, timeout)
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
