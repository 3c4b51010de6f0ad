"""Single-controller distributions (``ray``, ``monarch``): what each node runs besides the driver.

The driver is the entrypoint, run once, on node 0: rank 0 of a world of size 1 (every other node
has no ranks), with ``RAY_ADDRESS`` or ``MONARCH_WORKER_ADDRESSES`` in its environment. Beside it,
every node runs the framework's daemon, planned here:

* ``ray``: node 0 runs the Ray head, ``ray start --head --block`` with its GCS on
  :attr:`World.controller_port`; every other node runs ``ray start --address=<head> --block``.
  The workers wait for the head's port to accept connections before they start; the driver waits
  until every node's daemon has joined (``runtime.agent.execution.raynodes``), or fails naming the ones that
  never did.
* ``monarch``: every node, node 0 included, runs Monarch's worker loop
  (``monarch.actor.run_worker_loop_forever``) serving on ``tcp://<its address>:<port>``
  (:meth:`World.worker_port`: the controller port, unless nodes share an address);
  the driver attaches to all of them (``monarch.actor.attach_to_workers``), which connects
  asynchronously; so the driver starts once every worker's port accepts connections, or fails
  naming the ones that never did.

Every node is a framework host, node 0 included, so a job of N pods is a Ray cluster (or a Monarch
host mesh) of N nodes. Standard library only.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Optional, Sequence

from runtime.agent.spec import ports
from runtime.agent.world import World

MONARCH_WORKER = (
    "import sys\n"
    "try:\n"
    "    from monarch.actor import run_worker_loop_forever\n"
    "except ImportError as exc:\n"
    "    sys.exit(f'trainplane: cannot start the monarch worker: {exc}; install torchmonarch in the image')\n"
    "run_worker_loop_forever(address=sys.argv[1], ca='trust_all_connections')\n"
)
"""What ``python -c`` runs as a Monarch worker, with the address to serve on as its argument."""


@dataclass(frozen=True)
class Daemon:
    """One node's framework daemon.

    Attributes:
        name: what it is, for its log prefix and failure reports: ``ray head``, ``ray worker`` or
            ``monarch worker``.
        argv: its command line, executable first (the daemon prefix, if any, before it).
        wait_for: ``host:port`` that must accept TCP connections before it starts, or ``""``.
    """

    name: str
    argv: tuple[str, ...]
    wait_for: str = ""


def daemon(
    world: World, node_rank: int, python: str = sys.executable, prefix: Sequence[str] = (),
    extra_args: Sequence[str] = (),
) -> Optional[Daemon]:
    """The daemon node ``node_rank`` runs in ``world``; ``None`` for an SPMD distribution.

    Args:
        world: the running world.
        node_rank: the node's position in ``world.nodes``.
        python: the interpreter that runs a Monarch worker.
        prefix: command put before the daemon's (a wrapper such as ``numactl``, or a test's stand-in).
        extra_args: ray only: appended to ``ray start`` (``--num-cpus=4``, ``--object-store-memory=...``).
    """
    node = world.nodes[node_rank]
    port = world.controller_port
    if world.distribution == "monarch":
        return Daemon("monarch worker", (*prefix, python, "-c", MONARCH_WORKER, world.worker_address(node_rank)))
    if world.distribution != "ray":
        return None
    common = ("--block", f"--node-ip-address={node.addr}", "--disable-usage-stats")
    head = world.head_address
    if node_rank == 0:
        argv = (
            "ray", "start", "--head", *common, f"--port={port}",
            f"--ray-client-server-port={ports.ray_client_port(world.master_port)}",
            f"--dashboard-port={ports.ray_dashboard_port(world.master_port)}",
            "--include-dashboard=false",
        )
        return Daemon("ray head", (*prefix, *argv, *extra_args))
    return Daemon("ray worker", (*prefix, "ray", "start", f"--address={head}", *common, *extra_args), wait_for=head)


@dataclass(frozen=True)
class DriverWait:
    """What the driver's bootstrap waits for before the driver's code runs.

    Attributes:
        endpoints: ``host:port`` addresses that must accept TCP connections: the Ray head, or every
            Monarch worker.
        ray_nodes: a Ray job: the node addresses (node-rank order) whose daemons must all have
            joined the head, as ``ray.nodes()`` reports them; ``()`` otherwise.
    """

    endpoints: tuple[str, ...] = ()
    ray_nodes: tuple[str, ...] = ()


def driver_wait(world: World) -> DriverWait:
    """What the driver waits for: for ``ray``, the head's port and then every node in
    ``ray.nodes()``; for ``monarch``, every worker's port (``attach_to_workers`` itself connects
    asynchronously, so the driver would otherwise start before a worker is up); nothing otherwise."""
    if world.distribution == "ray":
        return DriverWait((world.head_address,), tuple(n.addr for n in world.nodes))
    if world.distribution == "monarch":
        return DriverWait(tuple(world.worker_address(i).removeprefix("tcp://") for i in range(len(world.nodes))))
    return DriverWait()
