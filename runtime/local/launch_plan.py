"""Where a local job's agents listen: one loopback address and agent port per node, and the block
of ports the job counts up from its master port, reserved across processes (``runtime.local.reservation``)
so that a job planned at the same moment by another process picks others. Standard library only.
"""

from __future__ import annotations

import random
import socket
from dataclasses import dataclass, field
from typing import Optional, Sequence

from runtime.agent.spec.ports import reserved_ports
from runtime.local.reservation import LOCK_DIR, PortReservation, reserve


@dataclass(frozen=True)
class LaunchPlan:
    """Where each node's agent listens.

    Attributes:
        addresses: one loopback address per node, by node id.
        ports: one agent port per node, by node id.
        master_port: rendezvous port on node 0.
        reservation: the locks that keep another job planned on this machine off these ports
            (``runtime.local.reservation``), held until the job is over.
    """

    addresses: tuple[str, ...]
    ports: tuple[int, ...]
    master_port: int
    reservation: Optional[PortReservation] = field(default=None, compare=False, repr=False)



EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
"""Linux's range of local ports for outgoing connections (``first last``, inclusive)."""
EPHEMERAL_FALLBACK = (32768, 65535)
"""The ephemeral range assumed where :data:`EPHEMERAL_RANGE_FILE` cannot be read: Linux's default
start and the IANA range's end (macOS and Windows use 49152..65535)."""
LISTEN_FLOOR = 20000
"""Lowest port :func:`free_port` picks: below it sit the well-known and commonly configured services and
Ray's worker ports (10002..19999 unless ``--min-worker-port``/``--max-worker-port`` say otherwise; a Ray
head refuses to start when a port it was given lies in that range)."""
FREE_PORT_TRIES = 1000
"""Random picks :func:`free_port` tries in the listening range before it asks the OS."""


def ephemeral_range(path: str = EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    """The inclusive range the OS draws outgoing connections' local ports from.

    A port in it can be taken at any moment by any process's outgoing connection (a kept-alive HTTP
    connection, a test cluster's watch), and TensorFlow's gRPC server, which binds ``0.0.0.0:port``,
    then fails with "Could not start gRPC server"; ports a job listens on later are picked outside it.
    """
    try:
        with open(path, encoding="ascii") as f:
            first, last = (int(x) for x in f.read().split())
    except (OSError, ValueError):
        return EPHEMERAL_FALLBACK
    return first, last


def listening_range(size: int, ephemeral: tuple[int, int]) -> Optional[range]:
    """First ports of ``size`` consecutive ports that lie outside ``ephemeral`` and above
    :data:`LISTEN_FLOOR`: the larger gap below or above it, or ``None`` when neither holds a block."""
    below = range(LISTEN_FLOOR, ephemeral[0] - size + 1)
    above = range(ephemeral[1] + 1, 65536 - size + 1)
    best = max(below, above, key=len)
    return best if len(best) else None


def free_port(host: str, avoid: Sequence[int] = (), size: int = 1) -> int:
    """The first of ``size`` consecutive TCP ports that are free now on ``host`` and on every
    address of this machine, none in ``avoid``, picked at random outside the OS's ephemeral range
    (:func:`ephemeral_range`) so that no outgoing connection takes one before the job binds it.
    Where that range leaves no room (an unusual ``ip_local_port_range``) the OS picks the port.

    Args:
        host: the IPv4 address the port will be bound on.
        avoid: ports none of the block may be.
        size: how many consecutive ports, from the one returned.

    Raises:
        RuntimeError: no free block was found.
    """
    candidates = listening_range(size, ephemeral_range()) or range(0)
    for _ in range(FREE_PORT_TRIES if candidates else 0):
        base = random.choice(candidates)
        block = range(base, base + size)
        if not any(p in block for p in avoid) and all(_bindable(host, p) for p in block):
            return base
    for _ in range(FREE_PORT_TRIES):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            base = sock.getsockname()[1]
        block = range(base, base + size)
        if base + size <= 65536 and not any(p in block for p in avoid) and all(_bindable(host, p) for p in block):
            return base
    raise RuntimeError(f"no {size} free consecutive ports on {host} after {2 * FREE_PORT_TRIES} picks")


def _bindable(host: str, port: int) -> bool:
    """Whether ``port`` is free on ``host`` and on the wildcard address (TensorFlow binds ``0.0.0.0``)."""
    return port_is_free(host, port) and port_is_free("0.0.0.0", port)


def port_is_free(host: str, port: int) -> bool:
    """Whether a TCP port can be bound on ``host`` right now by a listener that sets ``SO_REUSEADDR``
    (as torch's TCPStore and the agent do), so a previous job's ``TIME_WAIT`` connections don't count."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def loopback_range_usable() -> bool:
    """Whether this host can bind 127.0.0.2 (Linux routes all of 127.0.0.0/8 to loopback)."""
    return port_is_free("127.0.0.2", 0)


PLAN_ATTEMPTS = 100
"""Port picks :func:`plan` tries before giving up, each refused by a port in use or reserved."""


def plan(workers: int, master_port: int, num_proc: int = 1, lock_dir: str = LOCK_DIR) -> LaunchPlan:
    """Choose addresses and ports, and reserve the ports (``runtime.local.reservation``) so that a job
    planned at the same moment by another process on this machine picks others: distinct loopback
    addresses (127.0.0.2, 127.0.0.3, ...) when :func:`loopback_range_usable`, else 127.0.0.1 for
    every node with distinct agent ports. The job releases the reservation when it is over (this
    process's exit releases it too).

    Args:
        workers: nodes.
        master_port: the job's base port (TCP); 0 picks one whose reserved range (rendezvous, JAX
            and TensorFlow ports, see ``contract.RENDEZVOUS_PORT_SPAN``) holds no agent's port and
            no port another job holds.
        num_proc: processes per node, for the number of TensorFlow ports to keep clear.
        lock_dir: where the reservations' lock files are.

    Raises:
        RuntimeError: ``master_port`` is taken on node 0's address or reserved by another job, or
            no free ports were found in :data:`PLAN_ATTEMPTS` tries.
    """
    block = reserved_ports(workers * num_proc)
    for _ in range(PLAN_ATTEMPTS):
        addresses, ports = _agent_ports(workers)
        base = master_port or free_port(addresses[0], ports, size=block)
        if master_port and not port_is_free(addresses[0], master_port):
            raise RuntimeError(f"--master-port: port {master_port} is in use on {addresses[0]}; pass another or 0")
        held = reserve((*ports, *range(base, base + block)), lock_dir)
        if held is not None:
            return LaunchPlan(addresses, ports, base, held)
        if master_port:
            raise RuntimeError(f"--master-port: ports {master_port}..{master_port + block - 1} are reserved by another "
                               f"job on this machine; pass another or 0")
    raise RuntimeError(f"no free ports for the job after {PLAN_ATTEMPTS} tries (every pick was in use or reserved by "
                       f"another job)")


def _agent_ports(workers: int) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """Addresses and agent ports for ``workers`` nodes, free now."""
    if loopback_range_usable():
        addresses = tuple(f"127.0.0.{2 + i}" for i in range(workers))
        port = free_port("127.0.0.1")
        while not all(port_is_free(a, port) for a in addresses):
            port = free_port("127.0.0.1", [port])
        return addresses, (port,) * workers
    chosen: list[int] = []
    for _ in range(workers):
        chosen.append(free_port("127.0.0.1", chosen))
    return ("127.0.0.1",) * workers, tuple(chosen)
