"""The node side of membership: what one agent does about what happens to it. Pure state machine.

The node-side twin of ``coordinator.Coordinator``: :meth:`Member.handle` takes an event (a world
arrived, a process or the framework daemon exited, the coordinator went silent or came back, a signal,
the coordinator no longer counts this node, a fatal error, the clock) with the current time and
returns a tuple of actions; the agent performs them (``runtime.agent.agent``). No I/O here, so every
node-side decision is unit testable with a fake clock. Standard library only.

States (:class:`MemberState`)::

    JOINING ──world──▶ RUNNING ──new world, same restart epoch──▶ RUNNING (change delivered)
       │                  │ ──new world, next epoch──────────────▶ RUNNING (processes restarted)
       │                  │ ──not in the new world / refused─────▶ REJOINING (elastic) ──backoff, world──▶ RUNNING
       │                  │ ──coordinator lost───────────────────▶ ORPHANED ──processes end──▶ FINISHED (or REJOINING)
       │                  │     ORPHANED ──a majority's votes─────▶ RUNNING (coordinating, next epoch)
       │                  │ ──fenced out (deposed coordinator)───▶ REJOINING (elastic)
       └──no world in time, fatal, stop signal, verdict──────────────────────────────────────▶ FINISHED
"""

from __future__ import annotations

import signal
from typing import Any, Callable, Optional

from runtime.agent import contract
from runtime.agent.execution.procs import ProcExit
from runtime.agent.rendezvous import events as ev
from runtime.agent.rendezvous.actions import (
    AnswerVote,
    AskVotes,
    DeliverChange,
    Exit,
    Finish,
    MemberAction,
    PassOn,
    Register,
    Report,
    Resign,
    Say,
    StartGeneration,
    StopJob,
    StopProcesses,
    TakeOver,
)
from runtime.agent.rendezvous.election import Election, fails_over, majority
from runtime.agent.rendezvous.nodestate import MemberState, MemberView, Running
from runtime.agent.spec.job import SINGLE_CONTROLLER
from runtime.agent.spec.signals import STOP_SIGNALS, parse_signals
from runtime.agent.spec.status import FAILED, RUNNING, STOPPED, SUCCEEDED, TERMINAL
from runtime.agent.world import World

WORLD_WAIT_MARGIN = 15.0
"""Seconds a registered node waits for a world beyond the quorum timeout."""
REJOIN_BACKOFF_CAP = 60.0
"""Most seconds a node whose processes keep failing waits before it registers again: a node left out
of an elastic world waits one TTL, doubled for each failure of its own processes so far (a node that
fails at every start is re-admitted ever more slowly while its failure budget lasts), up to this."""


class Member:
    """One node's membership decisions.

    Every piece of a node's membership state has this one writer: the agent's main thread, through
    :meth:`handle`. Helper threads read :attr:`view`.

    Fencing (one world at a time): a node takes only worlds newer by ``World.order`` (epoch, then
    generation), so a fenced-out coordinator's worlds are ignored. A coordinator lost to this node's
    heartbeats is not yet lost for the job: the node becomes a candidate in its turn and takes over
    only with the votes of a majority of the last world's nodes (``election``, where the rule is
    stated); until then it is orphaned and its training goes on. A coordinator told of a newer epoch
    (``Deposed``) stops its ranks and registers with the new coordinator (elastic jobs), so no rank
    runs in a world its agent no longer holds. A node whose processes all exited 0 reports it again to
    each coordinator it meets (a new world, the coordinator back); losing its coordinator, it stops
    with their code, in either order of the two, if its world never fails over, else once no node of
    its world answers its ballot (the job ended without it).

    Args:
        node_id: this node's stable id.
        local_world_size: user processes this node runs (0 on a single-controller job's daemon-only node).
        elastic: whether the job may continue without a node (``JobSpec.elastic``).
        signals_to_handle: the signals to pass on to every rank (torchrun's ``--signals-to-handle``).
        ttl: the heartbeat TTL, seconds: how long a removed node waits before it registers again.
        quorum_timeout: seconds the coordinator waits for quorum.
        coordinating: this node holds the coordinator role from the start (node 0).
        coordinator_port: the coordinator's agent port (TCP), until a world names the coordinator.
    """

    def __init__(self, *, node_id: int, local_world_size: int, elastic: bool, signals_to_handle: str, ttl: float,
                 quorum_timeout: float, coordinating: bool, coordinator_port: int = 0) -> None:
        self.node_id = node_id
        self.local_world_size = local_world_size
        self.elastic = elastic
        self.signals_to_handle = signals_to_handle
        self.signals = parse_signals(signals_to_handle)
        self.ttl = ttl
        self.quorum_timeout = quorum_timeout
        self.coordinating = coordinating
        self.world: Optional[World] = None
        """The newest world this node has (its view of the job)."""
        self.world_deadline = float("inf")
        """Monotonic time by which a joining node gives up waiting for its first world."""
        self.orphaned = False
        self.finished = False
        self._rejoining = False
        self._running: Optional[Running] = None
        self.failures = 0
        """Times this node's processes (or daemon) failed: the re-admission backoff's exponent."""
        self.coordinator: tuple[str, int] = ("", coordinator_port)
        """The coordinator's ``(address, port)``: found by registration, then named by each world."""
        self.registered = False
        self._election = Election(node_id, ttl)
        self._received = 0.0
        self.known: tuple[tuple[int, str, int], ...] = ()
        self._known_from: Optional[World] = None
        self.view = self._publish()
        """The read-only view of this node's state (:class:`MemberView`), for helper threads."""

    def _publish(self) -> MemberView:
        if self.world is not None and self.world is not self._known_from:
            self.known = tuple((n.node_id, n.addr, n.port) for n in self.world.nodes)
            self._known_from = self.world
        self.view = MemberView(world=self.world, coordinator=self.coordinator, registered=self.registered,
                               coordinating=self.coordinating, epoch=self._election.epoch(self.world), known=self.known)
        return self.view

    @property
    def state(self) -> MemberState:
        """Where this node is in the job (:class:`MemberState`)."""
        if self.finished:
            return MemberState.FINISHED
        if self.orphaned:
            return MemberState.ORPHANED
        if self.world is not None:
            return MemberState.RUNNING
        return MemberState.REJOINING if self._rejoining else MemberState.JOINING

    @property
    def running_generation(self) -> Optional[int]:
        """The generation whose processes run on this node, or ``None``."""
        return self._running.generation if self._running is not None else None

    def start(self, now: float) -> tuple[MemberAction, ...]:
        """The agent starts: register (a node that coordinates registers with itself at once)."""
        actions = self._register(0.0, now)
        self._publish()
        return actions

    def handle(self, event: ev.Event, now: float) -> tuple[MemberAction, ...]:
        """What to do about ``event`` at monotonic time ``now`` (nothing once :attr:`finished`)."""
        if self.finished:
            return ()
        actions = self._decide(event, now)
        if any(isinstance(a, Exit) for a in actions):
            self.finished = True
            self._running = None
        self._publish()
        return actions

    def newer(self, world: World) -> bool:
        """Whether ``world`` is news to this node (newer, or the verdict of its generation): a world
        :meth:`handle` takes rather than ignores."""
        return self.world is None or world.replaces(self.world)

    def _decide(self, event: ev.Event, now: float) -> tuple[MemberAction, ...]:
        decide: dict[type, Callable[[Any], tuple[MemberAction, ...]]] = {
            ev.WorldArrived: lambda e: self._on_world(e.world, now),
            ev.ProcessExited: lambda e: self._on_exit(e.exit, now),
            ev.DaemonExited: self._on_daemon_exit, ev.SignalReceived: lambda e: self._on_signal(e.signum),
            ev.Removed: lambda e: (StopProcesses(), *self._rejoin(e.reason, now)), ev.Registered: self._on_registered,
            ev.CoordinatorLost: lambda e: self._on_coordinator_lost(e, now), ev.CoordinatorBack: self._on_back,
            ev.VoteRequested: lambda e: (AnswerVote(e.reply, self._election.vote(e.ballot, self.world, now)),),
            ev.Probed: lambda e: (AnswerVote(e.reply, self._election.confirm(e.prober, e.epoch, self.world, now)),),
            ev.VotesCounted: lambda e: self._on_votes(e, now), ev.Deposed: lambda e: self._on_deposed(e, now),
            ev.Fatal: lambda e: (Say(e.message), Exit(e.exit_code)), ev.CoordinatorFound: self._on_found,
        }
        return decide.get(type(event), lambda _e: self._on_tick(now))(event)

    def _on_back(self, event: ev.CoordinatorBack) -> tuple[MemberAction, ...]:
        self.orphaned = False
        self._election.settle()
        said, world = Say(f"the coordinator answers again after {event.failures} failed heartbeat(s)" if event.failures
                          else "the coordinator hears this node again (through its tree parent)"), self.world
        if world is not None and world.status == RUNNING and self._ended() == 0:  # its report may have been lost
            return said, Report(world.generation, SUCCEEDED)
        return (said,)

    def _on_registered(self, _event: ev.Registered) -> tuple[MemberAction, ...]:
        self.registered = True
        return ()

    def _on_found(self, event: ev.CoordinatorFound) -> tuple[MemberAction, ...]:
        self.coordinator = event.address
        if not (event.running and self.coordinating and self.world is None):
            return ()
        self.coordinating = False
        host, port = event.address
        return Resign(), Say(f"the job already runs, coordinated from {host}:{port}: joining its world")

    # --- worlds ----------------------------------------------------------------------------------

    def _on_world(self, world: World, now: float) -> tuple[MemberAction, ...]:
        if not self.newer(world):
            return ()  # older, or a second copy (a push and a heartbeat reply can both bring one)
        previous, self.world = self.world, world
        if world.coordinator[1]:
            self.coordinator = (world.coordinator[1], world.coordinator[2])
        self._received = now
        self.orphaned = False
        self._election.settle()
        self.world_deadline = float("inf")
        self._rejoining = False
        if world.status in TERMINAL:
            return self._finish(world)
        if not world.has(self.node_id):
            return (StopProcesses(), *self._rejoin(f"generation {world.generation} does not include this node", now))
        running = self._running
        if running is not None and previous is not None and world.continues(previous, self.node_id):
            if self._ended() == 0:  # its report may not have reached this world's coordinator
                return DeliverChange(previous, world), Report(world.generation, SUCCEEDED)
            return (DeliverChange(previous, world),)
        self._running = Running(world.generation, daemon=world.distribution in SINGLE_CONTROLLER)
        return StopProcesses(), StartGeneration(world)

    def _finish(self, world: World) -> tuple[MemberAction, ...]:
        said: tuple[MemberAction, ...] = ()
        if not self.coordinating:
            if world.status == FAILED:
                said = (Say(f"job failed: {world.message.split(';')[0] if world.message else 'see the coordinator'}"),)
            elif world.status == STOPPED:
                said = (Say(f"job stopped: {world.message}"),)
        if world.status == FAILED and self.elastic:
            said += (Say(f"exiting {contract.EXIT_JOB_FAILED}: the elastic job failed for good (its verdict's exit "
                         f"code is {world.exit_code}); a replaced pod would start it again"),)
            return StopProcesses(), *said, Finish(world), Exit(contract.EXIT_JOB_FAILED)
        return StopProcesses(), *said, Finish(world), Exit(world.exit_code)

    def _rejoin(self, reason: str, now: float) -> tuple[MemberAction, ...]:
        self._running = None
        if not self.elastic:
            return Say(f"removed from the job ({reason}); the job is not elastic, so this node stops"), \
                Exit(contract.EXIT_RENDEZVOUS)
        self.world = None
        self._rejoining = True
        delay = min(REJOIN_BACKOFF_CAP, self.ttl * 2 ** self.failures)
        return (Say(f"{reason}: registering again in {delay:g} s"), *self._register(delay, now))

    def _register(self, delay: float, now: float) -> tuple[MemberAction, ...]:
        self.registered = False
        self.world_deadline = now + delay + self.quorum_timeout + WORLD_WAIT_MARGIN
        return (Register(delay),)

    # --- processes -------------------------------------------------------------------------------

    def _on_exit(self, ended: ProcExit, now: float) -> tuple[MemberAction, ...]:
        running, world = self._running, self.world
        if world is None or running is None or ended.generation != running.generation or ended.requested:
            return ()
        running.exits[ended.local_rank] = ended
        done = len(running.exits) == self.local_world_size
        if self.orphaned:
            if ended.exit_code != 0 and self.elastic:
                self.failures += 1
                return (StopProcesses(), *self._rejoin(f"rank {ended.rank} exited with code {ended.exit_code} while "
                                                       f"the coordinator is unreachable", now))
            if ended.exit_code != 0 or (done and not self._fails_over(world)):
                return Say(f"rank {ended.rank} {ended.how} while the coordinator is unreachable; stopping this "
                           f"node"), Exit(ended.exit_code or max(e.exit_code for e in running.exits.values()))
            return ()  # done: reported to the coordinator that answers, this one or the one elected
        if world.status != RUNNING:
            return ()
        if ended.exit_code != 0:
            self.failures += 1
            return (Report(world.generation, FAILED, exit=ended),)
        return (Report(world.generation, SUCCEEDED),) if self._ended() == 0 else ()

    def _ended(self) -> Optional[int]:
        return self._running.ended(self.local_world_size) if self._running is not None else None

    def _fails_over(self, world: World) -> bool:
        return fails_over(self.elastic, world)

    def _on_daemon_exit(self, event: ev.DaemonExited) -> tuple[MemberAction, ...]:
        """A failure if the daemon exited non-zero while the world runs (the driver's exit, not the
        daemon's, decides success); exit 0 (a Monarch host the driver shut down) is its own business."""
        running, world, ended = self._running, self.world, event.exit
        if world is None or running is None or not running.daemon or ended.generation != running.generation \
                or ended.requested:
            return ()
        if ended.exit_code == 0:
            return (Say(f"the {event.name} daemon exited with code 0"),)
        if self.orphaned:
            return Say(f"the {event.name} daemon exited with code {ended.exit_code} while the coordinator is "
                       f"unreachable; stopping this node"), Exit(ended.exit_code)
        if world.status == RUNNING:
            self.failures += 1
            return (Report(world.generation, FAILED, exit=ended, daemon=event.name),)
        return ()

    # --- signals and the coordinator ----------------------------------------------------------

    def _on_signal(self, signum: int) -> tuple[MemberAction, ...]:
        name = signal.Signals(signum).name
        if signum not in STOP_SIGNALS:
            if signum not in self.signals:
                return (Say(f"received {name}, which {contract.TORCHELASTIC_SIGNALS_TO_HANDLE} "
                            f"({self.signals_to_handle}) does not name: ignored"),)
            return (PassOn(signum),)
        code = contract.EXIT_INTERRUPTED_BASE + signum
        passed = signum if signum in self.signals else signal.SIGTERM
        said = Say(f"received {name}: stopping processes" + (f" ({name} to each)" if passed != signal.SIGTERM else ""))
        world = self.world
        if self.coordinating and not self._others_go_on(world):
            tell: tuple[MemberAction, ...] = (StopJob(f"the coordinator received {name}", code),)
        elif self.coordinating:
            tell = ()  # this pod goes away (eviction, drain, spot reclaim): the lowest survivor takes over
        elif world is not None and world.status == RUNNING:
            tell = (Report(world.generation, STOPPED, message=f"received {name}", now=True),)
        else:
            tell = ()
        return said, StopProcesses(passed), *tell, Exit(code)

    def _others_go_on(self, world: Optional[World]) -> bool:
        """Whether the job goes on without this node when it leaves on a stop signal: an elastic job's
        running world has other nodes. A stop signal reaches one agent when its pod goes away
        (eviction, drain, spot reclaim) and every agent when the whole job stops (the launcher's
        Ctrl-C, ``pulumi destroy``): either way each node leaves, the job ends once the last has gone,
        and a coordinator that leaves first hands over by falling silent (the lowest survivor takes
        over, as when it is SIGKILLed)."""
        return self.elastic and world is not None and world.status == RUNNING and len(world.nodes) > 1

    def _on_coordinator_lost(self, event: ev.CoordinatorLost, now: float) -> tuple[MemberAction, ...]:
        world = self.world
        lost_id, addr, _ = event.coordinator
        if world is None or world.coordinator != event.coordinator or self.coordinating:
            return ()
        running = self._running
        if running is not None and running.daemon and not self.local_world_size:
            return Say(f"the coordinator (node {lost_id} at {addr}), which runs the driver, has been unreachable "
                       f"for {event.silent_for:.1f} s; this node's {world.distribution} daemon serves nobody: "
                       f"stopping"), Exit(contract.EXIT_NODE_LOST)
        self.orphaned = True
        lost = f"the coordinator (node {lost_id} at {addr}) has been unreachable for {event.silent_for:.1f} s" + (
            f" (so says its tree parent, node {event.via})" if event.via is not None else "")
        said, ended = f"{lost}; training continues", self._ended()
        if not self._fails_over(world):
            if ended is not None:  # they ended before the coordinator was lost: the same rule, in the other order
                return Say(f"{lost} and every process of this node has ended; stopping it"), Exit(ended)
            return (Say(f"{said}, and this node stops when its processes end"),)
        self._election.lose(lost_id, now)
        return (Say(f"{said}; a new coordinator takes over only with the votes of {majority(len(world.nodes))} of "
                    f"the world's {len(world.nodes)} nodes"), *self._stand(now))

    def _stand(self, now: float) -> tuple[MemberAction, ...]:
        """This node's ballot, when it is its turn to stand (``election``)."""
        world = self.world
        ballot = self._election.due(world, now) if not self.coordinating else None
        if world is None or ballot is None:
            return ()
        peers = tuple(n for n in world.nodes if n.node_id not in (self.node_id, ballot.lost))
        return (AskVotes(ballot, peers),)

    def _on_votes(self, event: ev.VotesCounted, now: float) -> tuple[MemberAction, ...]:
        if event.newer is not None:
            return self._on_world(event.newer, now)
        world, ballot = self.world, event.ballot
        ended = self._ended()
        if event.answered == 0 and ended is not None and self.orphaned and not self.coordinating:
            return Say("every process of this node has ended and no other node of its world answers (the job "
                       "ended without it); stopping this node"), Exit(ended)
        if self.coordinating or not self._election.counted(ballot, len(event.granted), event.seen, world, now) \
                or world is None:
            return ()
        self.coordinating, self.orphaned = True, False
        self._election.settle()
        voters = ", ".join(str(i) for i in sorted(event.granted))
        return Say(f"the coordinator (node {ballot.lost}) is lost for the job: nodes {voters} confirmed it "
                   f"({len(event.granted)} of {len(world.nodes)}); node {self.node_id} takes over in epoch "
                   f"{ballot.epoch}"), \
            TakeOver(world, ballot.lost, ballot.epoch, world.job_elapsed + max(0.0, now - self._received))

    def _on_deposed(self, event: ev.Deposed, now: float) -> tuple[MemberAction, ...]:
        """This node coordinated a world a newer epoch replaced: its ranks stop, and it registers with
        the new coordinator (it votes, meanwhile, as a node that lost its coordinator)."""
        self.coordinating = False
        self.coordinator = event.address
        world = self.world
        if world is not None:
            self._election.lose(world.coordinator[0], now)
        return (Say(f"fenced out, this node no longer coordinates: {event.reason}"), StopProcesses(),
                *self._rejoin("this node's world was replaced by a newer epoch", now))

    def _on_tick(self, now: float) -> tuple[MemberAction, ...]:
        if self.world is None and not self.coordinating and now > self.world_deadline:
            waited = self.quorum_timeout + WORLD_WAIT_MARGIN
            return Say(f"no world from the coordinator within {waited:g} s of registering; giving up"), \
                Exit(contract.EXIT_RENDEZVOUS)
        return self._stand(now) if self.orphaned else ()
