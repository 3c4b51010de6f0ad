"""What the membership state machines return for the agent to do: the coordinator's
(``coordinator.Coordinator``: :data:`CoordinatorAction`) and a node's own (``member.Member``:
:data:`MemberAction`). Plain values; the agent performs them. Standard library only.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Callable, Optional, Union

from runtime.agent.execution.procs import ProcExit
from runtime.agent.rendezvous.election import Ballot, Verdict
from runtime.agent.world import Node, World


@dataclass(frozen=True)
class Push:
    """Send ``world`` to every node in ``targets`` (the coordinator included)."""

    world: World
    targets: tuple[Node, ...]


@dataclass(frozen=True)
class Say:
    """A line for the agent's log (progress, verdicts, what a node decided)."""

    message: str


@dataclass(frozen=True)
class Probe:
    """Ask ``node`` directly whether its agent is up and which epoch it knows (``POST /probe`` within
    ``timeout`` seconds, :attr:`Coordinator.probe_timeout` when ``None``), for coordinator node
    ``prober`` of ``epoch``; answer with :meth:`Coordinator.probed`. A ``confirming`` probe asks only
    for the lease (``lease``): sent while a majority is unheard, when the whole fleet may be stalled,
    its failure loses no node. A ``suspicion`` probe follows a sign other than silence (a refused connection, a
    watched agent port's connection ended): a refused or reset connection loses the node, a timeout does not
    (a one-way fault can stop the probe while the node's beats still arrive; its silence decides)."""

    node: Node
    reason: str
    generation: int
    timeout: Optional[float] = None
    confirming: bool = False
    prober: int = 0
    epoch: int = 1
    asked: float = 0.0
    """The coordinator's monotonic time when it decided to send the probe (before it is sent). An answer in its epoch
    counts as the node heard at this time, not when the answer is read: the node's ``Election.confirm`` window opens
    when it answers, later, so the coordinator's ``ttl - margin`` never outlasts it, however late the answer is read."""
    suspicion: bool = False


@dataclass(frozen=True)
class StepDown:
    """This coordinator was fenced out: a node knows a newer epoch (``reason`` says which). Give the
    role up; ``address`` is the new coordinator's ``(address, port)`` when known (``""`` otherwise)."""

    reason: str
    address: tuple[str, int]


CoordinatorAction = Union[Push, Say, Probe, StepDown]
"""What :class:`~runtime.agent.rendezvous.coordinator.Coordinator` decides."""


# --- actions ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Register:
    """Register with the coordinator after ``delay`` seconds (with this node's coordinator itself when it
    holds the role)."""

    delay: float


@dataclass(frozen=True)
class StartGeneration:
    """Start this node's processes (and framework daemon) for ``world``."""

    world: World


@dataclass(frozen=True)
class StopProcesses:
    """Stop this node's processes and daemon: ``sig``, then SIGKILL after the grace period."""

    sig: int = signal.SIGTERM


@dataclass(frozen=True)
class DeliverChange:
    """Tell this node's live processes that the world changed from ``previous`` to ``world``."""

    previous: World
    world: World


@dataclass(frozen=True)
class PassOn:
    """Send ``signum`` to every rank of this node (the job goes on)."""

    signum: int


@dataclass(frozen=True)
class Report:
    """Tell the coordinator this node's processes changed ``state`` in ``generation``: ``succeeded``,
    ``failed`` (``exit`` says which process, ``daemon`` names a framework daemon) or ``stopped``
    (``message`` says why; ``now``: before the agent exits, not in the background)."""

    generation: int
    state: str
    exit: Optional[ProcExit] = None
    daemon: str = ""
    message: str = ""
    now: bool = False


@dataclass(frozen=True)
class TakeOver:
    """Become the coordinator of ``world``, whose coordinator (node ``lost``) is lost for the job, in
    ``epoch``; the job has run ``elapsed`` seconds (its time limit counts on from there)."""

    world: World
    lost: int
    epoch: int
    elapsed: float


@dataclass(frozen=True)
class AskVotes:
    """Send ``ballot`` to ``peers`` (``POST /vote``) and count the answers (a ``VotesCounted`` event)."""

    ballot: Ballot
    peers: tuple[Node, ...]


@dataclass(frozen=True)
class AnswerVote:
    """Answer a candidate, or a coordinator's probe (``events.Probed``): ``reply(verdict)``."""

    reply: Callable[[Verdict], None]
    verdict: Verdict


@dataclass(frozen=True)
class StopJob:
    """This node coordinates and is stopping: stop every other node with ``message`` and ``exit_code``."""

    message: str
    exit_code: int


@dataclass(frozen=True)
class Finish:
    """The job ended with ``world``'s verdict: record it (local mode's verdict file)."""

    world: World


@dataclass(frozen=True)
class Resign:
    """Give the coordinator role up before using it: another node coordinates the running world."""


@dataclass(frozen=True)
class Exit:
    """The agent exits with ``code``."""

    code: int


MemberAction = Union[Say, Register, StartGeneration, StopProcesses, DeliverChange, PassOn, Report, TakeOver, StopJob,
               Finish, Resign, AskVotes, AnswerVote, Exit]
"""What :class:`~runtime.agent.rendezvous.member.Member` decides."""
