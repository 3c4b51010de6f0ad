"""The coordinator's decisions: registration, quorum, world generations, job verdicts.

Pure state machine: methods take the current time and return actions (``Push`` a world to nodes,
``Say`` something to the log); the agent performs them. No I/O here, so every decision is unit
testable with a fake clock. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional, Union

from runtime.agent import contract
from runtime.agent.errors import QuorumTimeout
from runtime.agent.settings import AgentSettings
from runtime.agent.world import FAILED, RUNNING, STOPPED, SUCCEEDED, Failure, Node, World, nodes_from

LAST_CALL = 1.0
"""Seconds to wait for more nodes once quorum is met but not every node has registered
(torchrun's ``last_call_timeout`` idea, shorter)."""
PROGRESS_EVERY = 5.0
"""Seconds between repeated quorum progress lines."""


@dataclass(frozen=True)
class Push:
    """Send ``world`` to every node in ``targets`` (the coordinator included)."""

    world: World
    targets: tuple[Node, ...]


@dataclass(frozen=True)
class Say:
    """A progress or verdict line for the coordinator's log."""

    message: str


Action = Union[Push, Say]


class Rejected(Exception):
    """A registration the coordinator refuses; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Coordinator:
    """Rendezvous and job state on node 0.

    Args:
        settings: node 0's agent settings (workers, quorum, timeouts, restarts, job id).
        now: the current monotonic time, seconds.
    """

    def __init__(self, settings: AgentSettings, now: float) -> None:
        self._s = settings
        self._started = now
        self._quorum_at: Optional[float] = None
        self._last_progress = -PROGRESS_EVERY
        self._progress_count = -1
        self.members: dict[int, Node] = {}
        self.world: Optional[World] = None
        self._states: dict[int, str] = {}
        self._failures: list[Failure] = []

    # --- registration and quorum ---------------------------------------------------------------

    def register(self, node: Node, now: float) -> list[Action]:
        """A node asks to join.

        Raises:
            Rejected: the node id is outside the job (400), or the world has already formed without
                it (409).
        """
        if not 0 <= node.node_id < self._s.workers:
            raise Rejected(400, f"node rank {node.node_id} is outside this job's 0..{self._s.workers - 1}")
        if self.world is not None:
            if any(n == node for n in self.world.nodes):
                return []
            raise Rejected(
                409, f"the world formed at generation {self.world.generation} without node {node.node_id}"
            )
        self.members[node.node_id] = node
        if len(self.members) >= self._s.quorum and self._quorum_at is None:
            self._quorum_at = now
        return self.tick(now)

    def tick(self, now: float) -> list[Action]:
        """Time-driven decisions: progress lines, forming the world, quorum timeout."""
        if self.world is not None:
            return []
        actions: list[Action] = []
        count = len(self.members)
        if count != self._progress_count or now - self._last_progress >= PROGRESS_EVERY:
            self._progress_count, self._last_progress = count, now
            actions.append(Say(f"{count}/{self._s.workers} nodes registered (quorum {self._s.quorum})"))
        if count == self._s.workers or (self._quorum_at is not None and now - self._quorum_at >= LAST_CALL):
            return [*actions, self._form()]
        if now - self._started >= self._s.quorum_timeout:
            missing = [i for i in range(self._s.workers) if i not in self.members]
            error = QuorumTimeout(missing, count, self._s.quorum, self._s.quorum_timeout)
            world = self._new_world(0).finished(FAILED, str(error), contract.EXIT_RENDEZVOUS)
            self.world = world
            return [*actions, Say(str(error)), Push(world, world.nodes)]
        return actions

    def _new_world(self, restart_count: int) -> World:
        generation = self.world.generation + 1 if self.world else 1
        return World(
            job=self._s.job,
            generation=generation,
            restart_count=restart_count,
            max_restarts=self._s.max_restarts,
            nodes=nodes_from(self.members.values()),
            master_port=self._s.master_port,
            distribution=self._s.distribution,
        )

    def _form(self) -> Push:
        self.world = self._new_world(0)
        self._states = {n.node_id: RUNNING for n in self.world.nodes}
        return Push(self.world, self.world.nodes)

    # --- reports from nodes ----------------------------------------------------------------------

    def report(
        self, node_id: int, generation: int, state: str, failure: Optional[Failure] = None, message: str = ""
    ) -> list[Action]:
        """A node's processes changed state for ``generation``.

        Args:
            node_id: the reporting node.
            generation: the generation the report is about; stale reports are ignored.
            state: ``succeeded`` (all its processes exited 0), ``failed`` (one exited non-zero;
                ``failure`` says which) or ``stopped`` (the node is shutting down; ``message`` says why).
            failure: the failing process, for ``failed``.
            message: the reason, for ``stopped``.
        """
        world = self.world
        if world is None or world.status != RUNNING or generation != world.generation:
            return []
        if node_id not in self._states:
            return []
        if state == SUCCEEDED:
            self._states[node_id] = SUCCEEDED
            if all(s == SUCCEEDED for s in self._states.values()):
                self.world = world.finished(SUCCEEDED, "every rank exited 0", contract.EXIT_OK)
                return [Say("job succeeded: every rank exited 0"), Push(self.world, world.nodes)]
            return []
        if state == FAILED and failure is not None:
            self._failures.append(failure)
            return self._after_failure(world, failure.describe())
        if state == STOPPED:
            self._failures.append(
                Failure(rank=-1, node_id=node_id, local_rank=-1, exit_code=contract.EXIT_INTERRUPTED_BASE)
            )
            return self._after_failure(world, f"node {node_id} stopped: {message}")
        return []

    def _after_failure(self, world: World, reason: str) -> list[Action]:
        if world.restart_count < self._s.max_restarts:
            self.world = replace(self._new_world(world.restart_count + 1), nodes=world.nodes)
            self._states = {n.node_id: RUNNING for n in world.nodes}
            self._failures = []
            return [
                Say(f"{reason}\nrestarting ({self.world.restart_count}/{self._s.max_restarts}) "
                    f"as generation {self.world.generation}"),
                Push(self.world, world.nodes),
            ]
        cause = min(self._failures, key=lambda f: (f.timestamp, f.rank))
        exit_code = cause.exit_code or 1
        message = cause.describe() if cause.rank >= 0 else reason
        self.world = world.finished(FAILED, message, exit_code, cause if cause.rank >= 0 else None)
        return [Say(f"job failed: {message}"), Push(self.world, world.nodes)]

    def stop(self, message: str, exit_code: int) -> list[Action]:
        """Node 0 is shutting down (signal): stop every node."""
        nodes = self.world.nodes if self.world else nodes_from(self.members.values())
        base = self.world or self._new_world(0)
        self.world = replace(base, nodes=nodes).finished(STOPPED, message, exit_code)
        return [Push(self.world, nodes)]

    # --- views -----------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The membership view served at ``GET /members``."""
        world = self.world
        return {
            "job": self._s.job,
            "workers": self._s.workers,
            "quorum": self._s.quorum,
            "registered": sorted(self.members),
            "generation": world.generation if world else 0,
            "status": world.status if world else "forming",
            "members": [
                {"node_id": n.node_id, "addr": n.addr, "port": n.port, "num_proc": n.num_proc,
                 "state": self._states.get(n.node_id, "registered")}
                for n in nodes_from(self.members.values())
            ],
        }
