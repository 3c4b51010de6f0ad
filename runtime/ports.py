"""Where a local job's agents listen: one loopback address and agent port per node, and the block
of ports the job counts up from its master port, reserved across processes (``runtime.reservation``)
so that a job planned at the same moment by another process picks others. Standard library only.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from typing import Optional, Sequence

from runtime.agent.execution.environment import reserved_ports
from runtime.reservation import LOCK_DIR, PortReservation, reserve


@dataclass(frozen=True)
class LaunchPlan:
    """Where each node's agent listens.

    Attributes:
        addresses: one loopback address per node, by node id.
        ports: one agent port per node, by node id.
        master_port: rendezvous port on node 0.
        reservation: the locks that keep another job planned on this machine off these ports
            (``runtime.reservation``), held until the job is over.
    """

    addresses: tuple[str, ...]
    ports: tuple[int, ...]
    master_port: int
    reservation: Optional[PortReservation] = field(default=None, compare=False, repr=False)



def free_port(host: str, avoid: Sequence[int] = ()) -> int:
    """A TCP port that is free on ``host`` now and not in ``avoid`` (chosen by the OS)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = sock.getsockname()[1]
        if port not in avoid:
            return port


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
    """Choose addresses and ports, and reserve the ports (``runtime.reservation``) so that a job
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
        base = master_port
        while not base:  # a free base port whose block holds no agent port and fits below 65536
            pick = free_port(addresses[0])
            base = pick if pick + block <= 65536 and not any(pick <= p < pick + block for p in ports) else 0
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
            port = free_port("127.0.0.1")
        return addresses, (port,) * workers
    chosen: list[int] = []
    for _ in range(workers):
        chosen.append(free_port("127.0.0.1", chosen))
    return ("127.0.0.1",) * workers, tuple(chosen)
