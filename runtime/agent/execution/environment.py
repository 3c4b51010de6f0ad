"""The environment contract of one user process, derived from the world by pure functions.

Everything that depends on the world (ranks, sizes, addresses, ports, every framework's variables)
is here, so a membership change recomputes it the same way on every node; what torchrun's agent adds
that does not depend on the world is ``torchrun.worker_env``. Standard library only.
"""

from __future__ import annotations

import ipaddress
import json

from runtime.agent import contract
from runtime.agent.spec import ports
from runtime.agent.spec.address import host_port
from runtime.agent.spec.job import DEFAULT_ROLE
from runtime.agent.world import World


def process_env(world: World, node_rank: int, local_rank: int, role: str = DEFAULT_ROLE) -> dict[str, str]:
    """The environment contract of one user process (DESIGN.md, "Environment contract").

    Args:
        world: the running world.
        node_rank: position of the process's node in ``world.nodes``.
        local_rank: index of the process on its node, ``0 <= local_rank < num_proc``.
        role: the workers' role (torchrun's ``--role``), ``ROLE_NAME``; every rank has the one role,
            so ``ROLE_RANK`` is ``RANK`` and ``ROLE_WORLD_SIZE`` is ``WORLD_SIZE``.

    Returns:
        Variable name to value. ``spmd`` sets every framework's variables; ``pytorch``, ``jax``
        and ``tensorflow`` set the common ones plus their own. ``ray`` and ``monarch`` worlds have
        one process, the driver on node 0 (rank 0 of world size 1; ``POD_IPS`` still lists every
        node), which also gets ``RAY_ADDRESS`` or ``MONARCH_WORKER_ADDRESSES``.

    Raises:
        IndexError: ``node_rank`` or ``local_rank`` is outside the world.
    """
    node = world.nodes[node_rank]
    if not 0 <= local_rank < node.num_proc:
        raise IndexError(f"local_rank {local_rank} outside 0..{node.num_proc - 1}")
    rank = world.first_rank(node_rank) + local_rank
    world_size = world.world_size
    master = world.master_addr
    env = {
        contract.WORLD_SIZE: str(world_size),
        contract.RANK: str(rank),
        contract.LOCAL_RANK: str(local_rank),
        contract.LOCAL_WORLD_SIZE: str(node.num_proc),
        contract.NODE_RANK: str(node_rank),
        contract.GROUP_RANK: str(node_rank),
        contract.NODE_WORLD_SIZE: str(len(world.nodes)),
        contract.GROUP_WORLD_SIZE: str(len(world.nodes)),
        contract.POD_IPS: ",".join(n.addr for n in world.nodes),
        contract.MASTER_ADDR: master,
        contract.MASTER_PORT: str(world.rendezvous_port),
        contract.TRAINPLANE_GENERATION: str(world.generation),
    }
    dist = world.distribution
    if dist in ("spmd", "pytorch"):
        env[contract.TORCHELASTIC_RUN_ID] = world.job
        env[contract.TORCHELASTIC_RESTART_COUNT] = str(world.restart_count)
        env[contract.TORCHELASTIC_MAX_RESTARTS] = str(world.max_restarts)
        env[contract.ROLE_NAME] = role
        env[contract.ROLE_RANK] = str(rank)
        env[contract.ROLE_WORLD_SIZE] = str(world_size)
    if dist in ("spmd", "jax"):
        env[contract.JAX_COORDINATOR_ADDRESS] = host_port(master, world.jax_coordinator_port)
        env[contract.JAX_NUM_PROCESSES] = str(world_size)
        env[contract.JAX_PROCESS_ID] = str(rank)
        env[contract.JAX_LOCAL_DEVICE_IDS] = str(local_rank)
    if dist in ("spmd", "tensorflow"):
        env[contract.TF_CONFIG] = tf_config(world, rank)
    if dist == "ray":
        env[contract.RAY_ADDRESS] = world.head_address
    if dist == "monarch":
        env[contract.MONARCH_WORKER_ADDRESSES] = ",".join(world.worker_address(i) for i in range(len(world.nodes)))
    return env


def host_of(addr: str) -> str:
    """The machine an address is on, for ports that must not collide: every loopback address
    (127.0.0.0/8, ``::1``, ``localhost``) is this one machine; any other address is its own."""
    try:
        loopback = ipaddress.ip_address(addr).is_loopback
    except ValueError:
        loopback = addr == "localhost"
    return "loopback" if loopback else addr


def tf_config(world: World, rank: int) -> str:
    """TensorFlow's ``TF_CONFIG``: one worker entry per process, this process's index.

    Ports start at ``spec.ports.first_tf_port`` and count the processes on the same
    machine (:func:`host_of`): the local rank when every node has a machine of its own, so no two
    entries collide where nodes share one (the local launcher's 127.0.0.x addresses, or its
    single-address fallback: TensorFlow's gRPC server binds ``0.0.0.0:port``, not the address in
    its entry), and none takes a torch or JAX rendezvous port.
    """
    first = ports.first_tf_port(world.master_port)
    taken: dict[str, int] = {}
    workers: list[str] = []
    for node in world.nodes:
        host = host_of(node.addr)
        before = taken.get(host, 0)
        workers.extend(f"{host_port(node.addr, first + before + i)}" for i in range(node.num_proc))
        taken[host] = before + node.num_proc
    return json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": rank}})
