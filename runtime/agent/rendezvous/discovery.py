"""Finding the running world's coordinator through the other nodes: how a node that starts while the
job runs (a replaced pod, node 0's included) joins that world instead of starting a new one.
Standard library only.

The coordinator can move (the lowest survivor takes over when node 0 is lost), so a node started
late asks the other indices' agents (``NodeIdentity.peers``: ``<job>-{index}.<service>`` on
Kubernetes, every index's name under the headless Service, not only ``<job>-0``) for their ``GET
/info`` (:func:`running_coordinator`).
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

from runtime.agent import contract
from runtime.agent.errors import RendezvousError
from runtime.agent.net.peer import Exchange, PeerTransport
from runtime.agent.net.resolver import Resolver
from runtime.agent.spec.address import split_host_port
from runtime.agent.spec.status import RUNNING

ASK_TIMEOUT = 1.0
"""Seconds the peers get to answer, together."""


def peer_addresses(peers: Sequence[str], node_count: int, default_port: int) -> list[tuple[int, str, int]]:
    """``(node id, host, port)`` of every peer: one entry with ``{index}`` stands for every index
    below ``node_count``; a peer without a port listens on ``default_port``."""
    if len(peers) == 1 and "{index}" in peers[0]:
        peers = [peers[0].replace("{index}", str(i)) for i in range(node_count)]
    found = []
    for node_id, text in enumerate(peers):
        try:
            host, port = split_host_port(text)
        except ValueError:
            continue
        found.append((node_id, host, default_port if port is None else port))
    return found


def running_coordinator(peers: Sequence[tuple[int, str, int]], me: int, transport: PeerTransport,
                        resolver: Resolver, clock: Callable[[], float]) -> Optional[tuple[str, int]]:
    """The ``(address, port)`` of the coordinator of the world the peers run in, or ``None``.

    Peers are asked in index order, skipping this node, and the first that answers decides: in a
    running world, its coordinator; otherwise (the job is forming, every node registering at once)
    nothing. So a discovery costs one request unless peers are gone, and a thousand nodes starting
    together do not ask each other a million times. All within :data:`ASK_TIMEOUT` seconds.

    Args:
        peers: :func:`peer_addresses`.
        me: this node's id.
        transport: the peer transport.
        resolver: name resolution (one attempt per name: a name that does not resolve is a pod not
            there yet).
        clock: monotonic clock, seconds.
    """
    deadline = clock() + ASK_TIMEOUT
    for node_id, host, port in peers:
        left = deadline - clock()
        if left <= 0:
            return None
        if node_id == me:
            continue
        try:
            exchange = Exchange(resolver.resolve(host, 0.0), port, "GET", contract.ROUTE_INFO)
        except RendezvousError:
            continue
        answer = transport.exchange(exchange, left)
        if not answer.ok:
            continue
        coordinator = answer.body.get("world_coordinator")
        if answer.body.get("status") == RUNNING and isinstance(coordinator, list) and len(coordinator) == 3:
            return str(coordinator[1]), int(coordinator[2])
        return None
    return None
