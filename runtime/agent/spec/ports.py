"""The job's port layout: the ports counted up from its base port (``master_port``), as every front end
and the pods' renderer plan them and every agent gives its processes and daemons
(``contract.RENDEZVOUS_PORT_SPAN`` gives the offsets): the one place that computes them; and the one check
of the base port (:func:`base_port`): 0 for a free port where the job starts on one machine, and a known
port where every node must know it (:func:`known_port`). Standard library only."""

from __future__ import annotations

from typing import Any, Optional

from runtime.agent import contract
from runtime.agent.spec.setting import TCP_PORT_FIX, Check, tcp_port, whole

FREE_PORT_PROBLEM = ("0 picks a free port when a job starts on one machine, and every node must know node 0's port "
                     "in advance")
"""Why the base port of a job whose nodes start apart (its agents, its pods) cannot be 0."""
OR_FREE_PORT = ", or 0 for a free one"
"""What a fix about the base port adds where the front end takes 0 for a free port (one machine's launcher)."""


def rendezvous_port(master_port: int, generation: int) -> int:
    """Generation ``generation``'s ``MASTER_PORT``: the base port for generation 1, then the next ones in
    ``contract.RENDEZVOUS_PORT_SPAN``, so no generation meets the previous one's TCPStore."""
    return master_port + (generation - 1) % contract.RENDEZVOUS_PORT_SPAN


def jax_coordinator_port(master_port: int, generation: int) -> int:
    """Generation ``generation``'s JAX coordinator port: like :func:`rendezvous_port`, but in the block
    starting at ``contract.JAX_PORT_OFFSET``, so it never equals ``MASTER_PORT``."""
    return rendezvous_port(master_port, generation) + contract.JAX_PORT_OFFSET


def first_tf_port(master_port: int) -> int:
    """The first TensorFlow worker port (``TF_CONFIG``); the others count up from it, one per process
    sharing a machine (``runtime.agent.execution.environment.tf_config``)."""
    return master_port + contract.TF_PORT_OFFSET


def controller_port(master_port: int) -> int:
    """Single-controller jobs: the Ray head's port (its GCS) on node 0, and every node's Monarch worker
    port (nodes sharing an address count up from it)."""
    return master_port + contract.CONTROLLER_PORT_OFFSET


def ray_client_port(master_port: int) -> int:
    """The Ray head's client server port (``ray://`` addresses)."""
    return master_port + contract.RAY_CLIENT_PORT_OFFSET


def ray_dashboard_port(master_port: int) -> int:
    """The Ray head's (minimal) dashboard port."""
    return master_port + contract.RAY_DASHBOARD_PORT_OFFSET


def reserved_ports(processes: int) -> int:
    """How many ports from the job's base port up a job of ``processes`` processes may use:
    rendezvous, JAX and TensorFlow (see ``contract.RENDEZVOUS_PORT_SPAN``)."""
    return contract.TF_PORT_OFFSET + processes


def framework_ports(distribution: str, master_port: int) -> tuple[tuple[str, int], ...]:
    """The named TCP ports a job of ``distribution`` listens on beyond the agent and rendezvous
    ports, as ``(name, port)``: Ray's head and client ports, or Monarch's worker port (inside the
    block :func:`reserved_ports` counts); none for an SPMD distribution."""
    if distribution == "ray":
        return ((contract.RAY_HEAD_PORT_NAME, controller_port(master_port)),
                (contract.RAY_CLIENT_PORT_NAME, ray_client_port(master_port)))
    if distribution == "monarch":
        return ((contract.MONARCH_PORT_NAME, controller_port(master_port)),)
    return ()


def known_port(value: Any) -> Optional[tuple[str, str]]:
    """A check for the job's base port where every node must know it before it starts (an agent's
    ``MASTER_PORT``, a pod's ``master_port``): a TCP port, 1 to 65535, and 0 refused saying why. A front end
    that knows every node must know the port checks this before the job spec's check (:func:`base_port`
    with ``free``), whose fix offers 0."""
    if value == 0 and not isinstance(value, bool):
        return FREE_PORT_PROBLEM, TCP_PORT_FIX
    return tcp_port()(value)


def base_port(free: bool) -> Check:
    """The check of the job's base port: ``free``, where 0 picks a free port (the job spec's own check, since
    a job that starts on one machine takes 0), 0 to 65535, its fix offering 0; else :func:`known_port`."""
    return whole(0, TCP_PORT_FIX + OR_FREE_PORT, 65535) if free else known_port


def port_block(master_port: int, processes: int, free: bool = False) -> Optional[tuple[str, str]]:
    """``(problem, fix)`` when the ports counted up from ``master_port`` for ``processes`` processes
    (:func:`reserved_ports`) run past 65535, else ``None``; ``{master_port}`` in them names the setting
    (each front end's name for it). ``free``: the front end takes 0 for a free port.
    """
    reserved = reserved_ports(processes)
    last = master_port + reserved - 1
    if last <= 65535 or (free and master_port == 0):
        return None
    return (f"the job uses {reserved} ports from it (rendezvous, JAX, TensorFlow), up to {last}, beyond the last "
            f"TCP port", f"use a {{master_port}} of at most {65536 - reserved}" + (OR_FREE_PORT if free else ""))
