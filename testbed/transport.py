"""An in-memory peer transport: agents' routes called directly, so dispatch and membership can be
unit-tested without sockets.

A :class:`FakeNetwork` holds each agent's routes by address; a :class:`FakeTransport` (a
``runtime.agent.net.peer.PeerTransport``) answers every exchange by calling the route, with the
server's own route lookup and the token check, every body through JSON as on the wire. An address
nobody serves refuses the connection, as a port nobody listens on does. A whole ``Agent`` runs on it
with :meth:`FakeNetwork.server` as its serving seam and a :class:`FakeTransport`, whose
:class:`FakeWatch` sees an address stop being served as the real watch sees a killed agent's port.
"""

from __future__ import annotations

import hmac
import json
import queue
import threading
import time
from collections import Counter
from typing import Any, Callable, Optional, Sequence

from runtime.agent import contract
from runtime.agent.errors import HttpError
from runtime.agent.net.peer import Answer, Exchange
from runtime.agent.net.server import Request, Response, Routes
from runtime.agent.spec.agent_http import UNAUTHORIZED, route
from runtime.agent.world import Node

CLOSED = "its agent closed the watch's connection to its agent port"
"""Why a :class:`FakeWatch` reports a node whose address stopped being served (``rendezvous.watch``'s words)."""
REFUSED = "its agent port refused a connection (Connection refused)"
"""Why a :class:`FakeWatch` reports a node whose address is not served when it starts watching it."""


class FakeNetwork:
    """The agents reachable in memory, by ``(host, port)``.

    Args:
        wait: waits on an event for at most that many seconds (``None``: no limit); whether it was set:
            how an exchange to a paused address waits out its timeout, and a batch its deadline (an
            in-memory job's fake clock passes its own).
    """

    def __init__(self, wait: Callable[[threading.Event, Optional[float]], bool] = threading.Event.wait) -> None:
        self.wait = wait
        self._servers: dict[tuple[str, int], tuple[str, Routes]] = {}
        self._paused: dict[tuple[str, int], threading.Event] = {}
        self._watches: list[FakeWatch] = []
        self._lock = threading.Lock()
        self.served: Counter[tuple[str, int]] = Counter()
        """Exchanges answered by each address's routes."""

    def serve(self, host: str, port: int, token: str, routes: Routes) -> None:
        """Answer exchanges to ``host:port`` with ``routes``, for requests carrying ``token``."""
        with self._lock:
            self._servers[host, port] = (token, routes)

    def serving(self, host: str, port: int) -> bool:
        """Whether ``host:port`` answers."""
        with self._lock:
            return (host, port) in self._servers

    def stop(self, host: str, port: int) -> None:
        """``host:port`` refuses connections from now on; every watch on it reports its node gone."""
        with self._lock:
            served = self._servers.pop((host, port), None) is not None
            watches = list(self._watches)
        for watch in watches if served else ():
            watch.closed(host, port)

    def pause(self, host: str, port: int) -> None:
        """``host:port`` takes connections but answers nothing until :meth:`resume` (a SIGSTOPped agent):
        an exchange to it waits, and times out unanswered at its timeout."""
        with self._lock:
            self._paused.setdefault((host, port), threading.Event())

    def resume(self, host: str, port: int) -> None:
        """``host:port`` answers again, the exchanges still waiting first."""
        with self._lock:
            resumed = self._paused.pop((host, port), None)
        if resumed is not None:
            resumed.set()

    def server(self, address: tuple[str, int], token: str, routes: Routes, *_args: Any, **_options: Any) -> FakeServer:
        """An ``Agent``'s serving seam (``net.server.ServerFactory``): its routes at ``address`` on this network."""
        return FakeServer(self, address, token, routes)

    def watching(self, watch: FakeWatch, on: bool) -> None:
        """Start (``on``) or stop telling ``watch`` of addresses that stop being served."""
        with self._lock:
            if on:
                self._watches.append(watch)
            elif watch in self._watches:
                self._watches.remove(watch)

    def answer(self, exchange: Exchange, token: str, index: int = 0, timeout: Optional[float] = None) -> Answer:
        """What the agent at the exchange's address answers, as the HTTP server would (a paused one:
        once it resumes, or nothing after ``timeout`` seconds)."""
        with self._lock:
            paused = self._paused.get((exchange.host, exchange.port))
        if paused is not None and not self.wait(paused, timeout):
            return Answer(index, None, error=f"{exchange.host}:{exchange.port} did not answer: timed out",
                          timed_out=True)
        with self._lock:
            server = self._servers.get((exchange.host, exchange.port))
        if server is None:
            return Answer(index, None, error=f"cannot connect to {exchange.host}:{exchange.port}: Connection refused",
                          refused=True)
        expected, routes = server
        with self._lock:
            self.served[exchange.host, exchange.port] += 1
        try:
            response = self._respond(exchange, token, expected, routes)
        except HttpError as exc:
            response = Response(exc.status, {"error": str(exc)})
        return Answer(index, response.status, json.loads(json.dumps(response.body)))

    @staticmethod
    def _respond(exchange: Exchange, token: str, expected: str, routes: Routes) -> Response:
        if (exchange.method, exchange.path) == ("GET", contract.ROUTE_HEALTHZ):
            return Response(200, {"ok": True})
        if not hmac.compare_digest(token.encode(), expected.encode()):
            raise HttpError(401, UNAUTHORIZED)
        handler = route(routes, exchange.method, exchange.path)
        body = json.loads(exchange.body) if exchange.body else {}
        if not isinstance(body, dict):
            raise HttpError(400, "body must be a JSON object")
        return handler(Request(exchange.method, exchange.path, body, "fake"))


class FakeServer:
    """An agent's routes served on a :class:`FakeNetwork` (a ``net.server.Server``)."""

    def __init__(self, network: FakeNetwork, address: tuple[str, int], token: str, routes: Routes) -> None:
        self._network, self._address, self._token, self._routes = network, address, token, routes

    @property
    def requests_served(self) -> int:
        """Exchanges its routes answered."""
        return self._network.served[self._address]

    def start(self) -> None:
        """Answer from now on."""
        self._network.serve(*self._address, self._token, self._routes)

    def stop(self) -> None:
        """Refuse from now on."""
        self._network.stop(*self._address)


class FakeWatch:
    """A ``peer.PortWatch`` on a :class:`FakeNetwork`: a followed node's address that stops being served
    reports the node gone at once (as a killed agent's kernel closes its connections), and one not served
    when first followed reports it refused; a silent address that is still served reports nothing.

    Args:
        network: where the nodes are served.
        gone: called with a node and why, from the thread that stopped its address (or that followed it).
    """

    def __init__(self, network: FakeNetwork, gone: Callable[[Node, str], None]) -> None:
        self._network = network
        self._gone = gone
        self._nodes: tuple[Node, ...] = ()
        self._lock = threading.Lock()
        network.watching(self, True)

    def follow(self, nodes: Sequence[Node]) -> None:
        """Watch exactly ``nodes`` from now on."""
        with self._lock:
            new = [n for n in nodes if n not in self._nodes]
            self._nodes = tuple(nodes)
        for node in new:
            if not self._network.serving(node.addr, node.port):
                self._gone(node, REFUSED)

    def closed(self, host: str, port: int) -> None:
        """``host:port`` stopped being served: report the followed nodes there."""
        with self._lock:
            nodes = [n for n in self._nodes if (n.addr, n.port) == (host, port)]
        for node in nodes:
            self._gone(node, CLOSED)

    def close(self) -> None:
        """Stop watching."""
        self._network.watching(self, False)


class FakeBatch:
    """Exchanges answered concurrently, each by its own thread (a route may block, as ``/exec`` does
    until its subtree answers); answers are handed on from the thread that runs the batch."""

    def __init__(self, transport: FakeTransport, exchanges: Sequence[Exchange], deadline: Optional[float]) -> None:
        self._transport = transport
        self._exchanges = list(exchanges)
        self._deadline = deadline
        self._answers: queue.SimpleQueue[Optional[Answer]] = queue.SimpleQueue()
        self._arrived = threading.Event()

    def run(self, on_answer: Callable[[Answer], None]) -> None:
        """As ``peer.Batch.run``: every answer, or the deadline, or :meth:`abort` (waited with the network's
        ``wait``)."""
        for index, exchange in enumerate(self._exchanges):
            threading.Thread(target=self._one, args=(index, exchange), daemon=True).start()
        pending = set(range(len(self._exchanges)))
        while pending:
            while not self._answers.empty():
                answer = self._answers.get()
                if answer is None:
                    return
                if answer.index in pending:
                    pending.discard(answer.index)
                    on_answer(answer)
            left = self._left()
            if not pending or (left is not None and left <= 0):
                break
            self._arrived.clear()
            if self._answers.empty():
                self._transport.network.wait(self._arrived, left)
        for index in sorted(pending):
            on_answer(Answer(index, None, error="no answer before the deadline", timed_out=True))

    def abort(self) -> None:
        """Stop :meth:`run` at once; answers still to come are dropped."""
        self._answers.put(None)
        self._arrived.set()

    def _left(self) -> Optional[float]:
        return None if self._deadline is None else self._deadline - self._transport.clock()

    def _one(self, index: int, exchange: Exchange) -> None:
        self._answers.put(self._transport.answer(exchange, index, self._left()))
        self._arrived.set()


class FakeTransport:
    """A ``PeerTransport`` over a :class:`FakeNetwork`.

    Args:
        network: the agents it reaches.
        token: the job token its requests carry.
        clock: monotonic clock, seconds (batch deadlines).
    """

    def __init__(self, network: FakeNetwork, token: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.network = network
        self.token = token
        self.clock = clock
        self.exchanges: list[Exchange] = []
        """Every exchange sent, in order."""
        self._lock = threading.Lock()
        self._cut = False
        self._released = threading.Event()
        self._released.set()

    @property
    def sent(self) -> int:
        """Exchanges sent so far."""
        with self._lock:
            return len(self.exchanges)

    def exchange(self, exchange: Exchange, timeout: float) -> Answer:
        """The peer's answer, at once (``timeout`` is waited only for a paused peer: nothing else here
        is slow but the routes)."""
        return self.answer(exchange, timeout=timeout)

    def batch(self, exchanges: Sequence[Exchange], deadline: Optional[float] = None) -> FakeBatch:
        """A batch of ``exchanges``, not started."""
        return FakeBatch(self, exchanges, deadline)

    def watch(self, gone: Callable[[Node, str], None], retry_after: float) -> FakeWatch:
        """A :class:`FakeWatch` on this transport's network (``retry_after`` is not needed: it never fails)."""
        return FakeWatch(self.network, gone)

    def close(self) -> None:
        """Nothing is kept open."""

    def hold(self) -> None:
        """Send nothing until :meth:`release`, as a SIGSTOPped agent does: every exchange waits."""
        with self._lock:
            if self._released.is_set():
                self._released = threading.Event()

    def release(self) -> None:
        """Send again, the exchanges held first."""
        with self._lock:
            self._released.set()

    def cut(self) -> None:
        """Reach nobody from now on, as a killed agent does: every exchange fails unanswered."""
        with self._lock:
            self._cut = True

    def answer(self, exchange: Exchange, index: int = 0, timeout: Optional[float] = None) -> Answer:
        """Record ``exchange`` and answer it (waiting ``timeout`` seconds at most for a paused peer)."""
        with self._lock:
            released = self._released
        if not released.is_set():
            self.network.wait(released, None)
        with self._lock:
            self.exchanges.append(exchange)
            cut = self._cut
        if cut:
            return Answer(index, None, error="this node was killed: it sends nothing")
        return self.network.answer(exchange, self.token, index, timeout)
