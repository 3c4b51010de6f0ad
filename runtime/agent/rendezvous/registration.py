"""Registration: find the coordinator and ask to join, retrying with backoff until the quorum timeout.
Runs in a thread of its own; what it cannot get past ends in a ``Fatal`` event. Standard library only.
"""

from __future__ import annotations

import threading
from typing import Callable, Optional

from runtime.agent import contract
from runtime.agent.errors import RendezvousError, TransportError, Unauthorized
from runtime.agent.net.peer import Exchange, PeerTransport
from runtime.agent.net.resolver import Resolver
from runtime.agent.net.transport import DEFAULT_TIMEOUT, encode
from runtime.agent.rendezvous.events import CoordinatorFound, Event, Fatal, Registered

FIRST_RETRY = 0.05
"""Seconds before the first retry of a registration no coordinator answered; doubled each time."""
LAST_RETRY = 1.0
"""Most seconds between two registration attempts."""
RESOLVE_STEP = 2.0
"""Seconds the coordinator's name gets to resolve before the peers are asked (``discovery``), again
and again until the quorum timeout."""


class Registration:
    """Registers this node with the coordinator. It writes no node state: what it learns goes to the
    agent's loop as events for ``Member`` (:class:`CoordinatorFound`, :class:`Registered`, :class:`Fatal`).

    Args:
        host: the coordinator's host name (resolved first, unless :attr:`address` has an address).
        body: the registration's ``PUT /members`` body (this node, ``"state": "joining"``).
        quorum_timeout: seconds to keep trying.
        transport: the peer transport.
        resolver: name resolution.
        address: returns the coordinator's known ``(address, port)`` (``address`` empty when unknown),
            from the node's read-only view.
        events: takes what registration learns (to the agent's loop).
        stopping: set when the agent stops.
        clock: monotonic clock, seconds.
        discover: the running world's coordinator as the other nodes know it (``discovery``), or
            ``None``: asked when ``host`` does not resolve, does not answer or does not coordinate
            (404), as when node 0 was lost and another node took over.
        wait: waits on an event for at most that many seconds of ``clock``; whether it was set
            (``threading.Event.wait``: real seconds; an in-memory test's fake clock passes its own).
    """

    def __init__(self, *, host: str, body: dict[str, object], quorum_timeout: float, transport: PeerTransport,
                 resolver: Resolver, address: Callable[[], tuple[str, int]], events: Callable[[Event], None],
                 stopping: threading.Event, clock: Callable[[], float],
                 discover: Callable[[], Optional[tuple[str, int]]] = lambda: None,
                 wait: Callable[[threading.Event, float], bool] = threading.Event.wait) -> None:
        self._host = host
        self._body = body
        self._timeout = quorum_timeout
        self._transport = transport
        self._resolver = resolver
        self._address = address
        self._events = events
        self._stopping = stopping
        self._clock = clock
        self._discover = discover
        self._wait = wait

    def start(self, delay: float) -> None:
        """Register from a background thread after ``delay`` seconds.

        A node dropped from the world waits one TTL before it asks to come back (as Kubernetes backs
        off a crashing container), so the survivors can re-form their process group first instead of
        being interrupted again mid-rendezvous.
        """
        threading.Thread(target=self.register, args=(delay,), name="register", daemon=True).start()

    def register(self, delay: float) -> None:
        """Wait ``delay`` seconds, then register (this thread), retrying until the quorum timeout."""
        if self._wait(self._stopping, delay):
            return
        deadline = self._clock() + self._timeout
        host, port = self._address()
        if not host:
            found = self._locate(port, deadline)
            if found is None:
                return
            host, port = found
            self._events(CoordinatorFound(found))
        retry = FIRST_RETRY
        exchange = Exchange(host, port, "PUT", contract.ROUTE_MEMBERS, encode(self._body))
        while not self._stopping.is_set():
            try:
                self._transport.exchange(exchange, DEFAULT_TIMEOUT).result(exchange)
                self._events(Registered())
                return
            except Unauthorized as exc:
                self._events(Fatal(f"the coordinator refused this node's token: {exc}", contract.EXIT_RENDEZVOUS))
                return
            except TransportError as exc:
                found = self._discover() if exc.status in (None, 404) else None
                if found is not None and found != (host, port):
                    host, port = found
                    exchange = Exchange(host, port, "PUT", contract.ROUTE_MEMBERS, encode(self._body))
                    self._events(CoordinatorFound(found))
                    continue
                if exc.status == 410:  # a closed rendezvous: the job finishes without this node
                    self._events(Fatal(f"not admitted, nothing to do: {exc}", contract.EXIT_OK))
                    return
                if exc.status not in (None, 404):  # 404: that node does not coordinate (yet): ask again
                    self._events(Fatal(f"registration refused: {exc}", contract.EXIT_RENDEZVOUS))
                    return
                if self._clock() + retry > deadline:
                    self._events(Fatal(f"coordinator {host}:{port} unreachable for {self._timeout:g} s: {exc}",
                                         contract.EXIT_RENDEZVOUS))
                    return
            self._wait(self._stopping, retry)
            retry = min(retry * 2, LAST_RETRY)

    def _locate(self, port: int, deadline: float) -> Optional[tuple[str, int]]:
        """The coordinator's ``(address, port)``: its name resolved, or, while the name does not
        resolve (node 0's pod is gone, and with it its DNS record), the running world's coordinator
        as the peers know it. ``None`` after a ``Fatal`` when neither answers by ``deadline``."""
        while True:
            try:
                return self._resolver.resolve(self._host, max(0.0, min(RESOLVE_STEP, deadline - self._clock()))), port
            except RendezvousError as exc:
                found = self._discover()
                if found is not None:
                    return found
                if self._clock() >= deadline or self._stopping.is_set():
                    self._events(Fatal(
                        f"could not resolve {self._host!r} within {self._timeout:g} s ({exc.__cause__}) and no peer "
                        f"runs a world; check that the headless Service exists and the pod's subdomain matches it",
                        contract.EXIT_RENDEZVOUS))
                    return None
