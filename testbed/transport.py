"""An in-memory peer transport: agents' routes called directly, so dispatch and membership can be
unit-tested without sockets.

A :class:`FakeNetwork` holds each agent's routes by address; a :class:`FakeTransport` (a
``runtime.agent.net.peer.PeerTransport``) answers every exchange by calling the route, with the
server's own route lookup and the token check, every body through JSON as on the wire. An address
nobody serves refuses the connection, as a port nobody listens on does.
"""

from __future__ import annotations

import hmac
import json
import queue
import threading
import time
from typing import Callable, Optional, Sequence

from runtime.agent import contract
from runtime.agent.errors import HttpError
from runtime.agent.net.peer import Answer, Exchange
from runtime.agent.net.server import Request, Response, Routes, route


class FakeNetwork:
    """The agents reachable in memory, by ``(host, port)``."""

    def __init__(self) -> None:
        self._servers: dict[tuple[str, int], tuple[str, Routes]] = {}
        self._lock = threading.Lock()

    def serve(self, host: str, port: int, token: str, routes: Routes) -> None:
        """Answer exchanges to ``host:port`` with ``routes``, for requests carrying ``token``."""
        with self._lock:
            self._servers[host, port] = (token, routes)

    def stop(self, host: str, port: int) -> None:
        """``host:port`` refuses connections from now on."""
        with self._lock:
            self._servers.pop((host, port), None)

    def answer(self, exchange: Exchange, token: str, index: int = 0) -> Answer:
        """What the agent at the exchange's address answers, as the HTTP server would."""
        with self._lock:
            server = self._servers.get((exchange.host, exchange.port))
        if server is None:
            return Answer(index, None, error=f"cannot connect to {exchange.host}:{exchange.port}: Connection refused",
                          refused=True)
        expected, routes = server
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
            raise HttpError(401, "missing or wrong bearer token")
        handler = route(routes, exchange.method, exchange.path)
        body = json.loads(exchange.body) if exchange.body else {}
        if not isinstance(body, dict):
            raise HttpError(400, "body must be a JSON object")
        return handler(Request(exchange.method, exchange.path, body, "fake"))


class FakeBatch:
    """Exchanges answered concurrently, each by its own thread (a route may block, as ``/exec`` does
    until its subtree answers); answers are handed on from the thread that runs the batch."""

    def __init__(self, transport: FakeTransport, exchanges: Sequence[Exchange], deadline: Optional[float]) -> None:
        self._transport = transport
        self._exchanges = list(exchanges)
        self._deadline = deadline
        self._answers: queue.SimpleQueue[Optional[Answer]] = queue.SimpleQueue()

    def run(self, on_answer: Callable[[Answer], None]) -> None:
        """As ``peer.Batch.run``: every answer, or the deadline, or :meth:`abort`."""
        for index, exchange in enumerate(self._exchanges):
            threading.Thread(target=self._one, args=(index, exchange), daemon=True).start()
        pending = set(range(len(self._exchanges)))
        while pending:
            timeout = None if self._deadline is None else self._deadline - self._transport.clock()
            if timeout is not None and timeout <= 0:
                break
            try:
                answer = self._answers.get(timeout=timeout)
            except queue.Empty:
                break
            if answer is None:
                return
            if answer.index in pending:
                pending.discard(answer.index)
                on_answer(answer)
        for index in sorted(pending):
            on_answer(Answer(index, None, error="no answer before the deadline", timed_out=True))

    def abort(self) -> None:
        """Stop :meth:`run` at once; answers still to come are dropped."""
        self._answers.put(None)

    def _one(self, index: int, exchange: Exchange) -> None:
        self._answers.put(self._transport.answer(exchange, index))


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

    @property
    def sent(self) -> int:
        """Exchanges sent so far."""
        with self._lock:
            return len(self.exchanges)

    def exchange(self, exchange: Exchange, timeout: float) -> Answer:
        """The peer's answer, at once (``timeout`` is not waited: nothing here is slow but the routes)."""
        return self.answer(exchange)

    def batch(self, exchanges: Sequence[Exchange], deadline: Optional[float] = None) -> FakeBatch:
        """A batch of ``exchanges``, not started."""
        return FakeBatch(self, exchanges, deadline)

    def close(self) -> None:
        """Nothing is kept open."""

    def answer(self, exchange: Exchange, index: int = 0) -> Answer:
        """Record ``exchange`` and answer it."""
        with self._lock:
            self.exchanges.append(exchange)
        return self.network.answer(exchange, self.token, index)
