"""Lightweight agents: service mode's real HTTP surface and fan-out, with calls run in-process.

For tests and benchmarks that need many nodes on one machine. A :class:`LightweightAgent` is an
``AgentServer`` serving a ``ServiceNode`` whose executor runs the called function in a thread of the
agent's own process (:class:`InProcessExecutor`) instead of in user processes, and its world is given
to it (no rendezvous). Everything between nodes - HTTP, auth, planning, merging, cancellation,
deadlines, status checks - is the production code. Standard library only.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
from typing import Callable, Optional, Sequence

from runtime.agent import contract
from runtime.agent.net.server import AgentServer, Request, Response
from runtime.agent.service.calls import remote_error
from runtime.agent.service.dispatch import ServiceNode
from runtime.agent.service.executor import LocalCall, RankDone, RankEvent, RankFailed
from runtime.agent.service.modes import LONG_RUNNING
from runtime.agent.spec.agent_settings import AgentSettings
from runtime.agent.spec.wire import JSON, pack_result
from runtime.agent.world import World

_context = threading.local()


def current_rank() -> int:
    """The global rank whose call this thread runs: what ``RANK`` is to a worker process.

    Raises:
        RuntimeError: called outside an in-process call.
    """
    rank = getattr(_context, "rank", None)
    if rank is None:
        raise RuntimeError("current_rank() is only known inside a call run by an InProcessExecutor")
    return int(rank)


class InProcessExecutor:
    """Runs each rank's call in a thread of this process: one long-lived thread per rank.

    Each rank's thread takes calls from its own queue, as ``WorkerPool`` gives each rank a slot thread
    feeding its process. A cancelled call is not interrupted (a thread cannot be); its result is
    simply not waited for, and the rank takes its next call once the function returns.

    Args:
        ranks: the global ranks this node serves, ascending.
        node_rank: the node's rank (for error reports).
    """

    def __init__(self, ranks: Sequence[int], node_rank: int) -> None:
        self.ranks = tuple(ranks)
        self._node_rank = node_rank
        self._queues: list[queue.SimpleQueue[Optional[LocalCall]]] = []
        for rank in self.ranks:
            calls: queue.SimpleQueue[Optional[LocalCall]] = queue.SimpleQueue()
            threading.Thread(target=self._serve, args=(rank, calls), name=f"inprocess-{rank}", daemon=True).start()
            self._queues.append(calls)

    def submit(self, call: LocalCall) -> None:
        """Start ``call`` on every rank; results arrive through ``call.post``."""
        for calls in self._queues:
            calls.put(call)

    def cancel(self, call_id: str) -> None:
        """Nothing to do: threads run to their end, and nobody waits for them."""

    def stop(self, grace: float) -> None:
        """Stop taking calls (threads finish what they run, then end)."""
        for calls in self._queues:
            calls.put(None)

    def _serve(self, rank: int, calls: queue.SimpleQueue[Optional[LocalCall]]) -> None:
        _context.rank = rank
        while True:
            call = calls.get()
            if call is None:
                return
            call.post(self._run(call, rank))

    def _run(self, call: LocalCall, rank: int) -> RankEvent:
        invocation = call.invocation
        try:
            args, kwargs = invocation.arguments()
            value = invocation.resolve()(*args, **kwargs)
            packed = pack_result(value, invocation.serialization)
            if invocation.serialization == JSON:
                json.dumps(packed)
        except Exception as exc:  # any exception of the user's function is its result
            return RankFailed(rank, remote_error(exc, rank, self._node_rank, invocation.fn))
        return RankDone(rank, packed)


class LightweightAgent:
    """One node: an HTTP server with ``GET /info``, ``POST /call`` and ``POST /exec``; calls in-process.

    Args:
        settings: the node's settings (node id, token, tree settings, pickle opt-in).
        host: address to bind.
        port: TCP port to bind; 0 picks a free one (see :attr:`port`).
        say: writes one line to a log (default: stderr).
    """

    def __init__(self, settings: AgentSettings, host: str = "127.0.0.1", port: int = 0,
                 say: Optional[Callable[[str], None]] = None) -> None:
        self.settings = settings
        self.world: Optional[World] = None
        self.service = ServiceNode(settings, world=lambda: self.world,
                                   say=say or (lambda line: print(line, file=sys.stderr)))
        routes = {("GET", contract.ROUTE_INFO): self._route_info, **self.service.routes()}
        self.server = AgentServer((host, port), settings.token, routes, max_body=contract.MAX_BODY_BYTES,
                                  job=settings.job, on_loop={("GET", contract.ROUTE_INFO)},
                                  long_running=LONG_RUNNING,
                                  deferred=self.service.deferred())
        self.service.use_loop(self.server.loop)

    @property
    def port(self) -> int:
        """The bound TCP port."""
        return int(self.server.server_address[1])

    def start(self) -> None:
        """Serve in a background thread."""
        self.server.start()

    def join(self, world: World) -> None:
        """Take ``world`` as this node's world and serve calls for it."""
        node_rank = world.node_rank_of(self.settings.node.node_id)
        first = world.first_rank(node_rank)
        self.service.use_executor(InProcessExecutor(range(first, first + world.nodes[node_rank].num_proc), node_rank))
        self.world = world

    def stop(self) -> None:
        """Stop serving and drop every connection, as a node that died would."""
        self.server.stop()
        self.service.close()

    def _route_info(self, _request: Request) -> Response:
        return Response(200, {"node_id": self.settings.node.node_id, "mode": "service", "lightweight": True,
                              "generation": self.world.generation if self.world else 0,
                              "service": self.service.stats()})
