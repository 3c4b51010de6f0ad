"""Service mode's routes as every agent serves them, whatever its mode: which of them run long, a
batch-mode agent's refusal of them, and service mode's dispatch built on first use. Kept apart from
``dispatch`` so a batch-mode agent does not import the service stack (code sync, hops, the worker
pool). Standard library only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional

from runtime.agent import contract
from runtime.agent.errors import HttpError
from runtime.agent.net.server import Request, Response, Routes

if TYPE_CHECKING:
    from runtime.agent.net.peer import PeerTransport
    from runtime.agent.service.dispatch import ServiceNode
    from runtime.agent.spec.agent_settings import AgentSettings
    from runtime.agent.world import Node, World

LONG_RUNNING = frozenset({("POST", contract.ROUTE_CALL), ("POST", contract.ROUTE_EXEC)})
"""The routes whose handlers hold their thread while a call runs (``/call``, ``/exec``): the server
gives them a pool of their own, so they never hold up an output read or a vote."""


def batch_mode_routes() -> Routes:
    """``/call`` and ``/exec`` for a batch-mode agent: 409, naming the setting that enables them."""

    def refuse(_request: Request) -> Response:
        raise HttpError(409, f"this job runs in batch mode; start it with {contract.MODE}=service to take calls")

    return {("POST", contract.ROUTE_CALL): refuse, ("POST", contract.ROUTE_EXEC): refuse}


def service_node(settings: AgentSettings, *, world: Callable[[], Optional[World]], say: Callable[[str], None],
                 on_unreachable: Callable[[Node], None], clock: Callable[[], float],
                 transport: Optional[PeerTransport]) -> ServiceNode:
    """A service-mode agent's dispatch: ``dispatch.ServiceNode`` with these arguments (see it), the
    service stack imported now."""
    from runtime.agent.service.dispatch import ServiceNode

    return ServiceNode(settings, world=world, say=say, on_unreachable=on_unreachable, clock=clock, transport=transport)
