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
       │                  │ ──coordinator lost, no successor─────▶ ORPHANED ──processes end──▶ FINISHED
       │                  │ ──coordinator lost, this node next───▶ RUNNING (coordinating)
       └──no world in time, fatal, stop signal, verdict──────────────────────────────────────▶ FINISHED
"""

from __future__ import annotations

import enum
import signal
from dataclasses import dataclass, field
from typing import Optional

from runtime.agent import contract
from runtime.agent.execution.procs import ProcExit
from runtime.agent.membership.actions import (
    DeliverChange,
    Exit,
    Finish,
    MemberAction,
    PassOn,
    Register,
    Report,
    Say,
    StartGeneration,
    StopJob,
    StopProcesses,
    TakeOver,
)
from runtime.agent.membership.events import (
    CoordinatorBack,
    CoordinatorLost,
    DaemonExited,
    Event,
    Fatal,
    ProcessExited,
    Removed,
    SignalReceived,
    WorldArrived,
)
from runtime.agent.spec.job import SINGLE_CONTROLLER
from runtime.agent.spec.signals import STOP_SIGNALS, parse_signals
from runtime.agent.world import FAILED, RUNNING, STOPPED, SUCCEEDED, TERMINAL, World

WORLD_WAIT_MARGIN = 15.0
"""Seconds a registered node waits for a world beyond the quorum timeout."""
REJOIN_BACKOFF_CAP = 60.0
"""Most seconds a node whose processes keep failing waits before it registers again: a node left out
of an elastic world waits one TTL, doubled for each failure of its own processes so far (a node that
fails at every start is re-admitted ever more slowly while its failure budget lasts), up to this."""


class MemberState(enum.Enum):
    """Where a node is in the job."""

    JOINING = "joining"
    """Registering, or registered and waiting for the first world."""
    RUNNING = "running"
    """In a running world, its processes (or its framework daemon) running."""
    REJOINING = "rejoining"
    """Left out of the world (elastic job): registers again after one TTL."""
    ORPHANED = "orphaned"
    """The coordinator is lost and nobody takes over: training goes on until the processes end."""
    FINISHED = "finished"
    """The agent exits (:class:`Exit` was returned)."""


@dataclass
class _Running:
    """The processes of one generation on this node."""

    generation: int
    daemon: bool
    exits: dict[int, ProcExit] = field(default_factory=dict)


class Member:
    """One node's membership decisions.

    Args:
        node_id: this node's stable id.
        local_world_size: user processes this node runs (0 on a single-controller job's daemon-only node).
        elastic: whether the job may continue without a node (``JobSpec.elastic``).
        signals_to_handle: the signals to pass on to every rank (torchrun's ``--signals-to-handle``).
        ttl: the heartbeat TTL, seconds: how long a removed node waits before it registers again.
        quorum_timeout: seconds the coordinator waits for quorum.
        coordinating: this node holds the coordinator role from the start (node 0).
    """

    def __init__(self, node_id: int, local_world_size: int, elastic: bool, signals_to_handle: str, ttl: float,
                 quorum_timeout: float, coordinating: bool) -> None:
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
        self._running: Optional[_Running] = None
        self.failures = 0
        """Times this node's processes (or daemon) failed: the re-admission backoff's exponent."""

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
        return self._register(0.0, now)

    def handle(self, event: Event, now: float) -> tuple[MemberAction, ...]:
        """What to do about ``event`` at monotonic time ``now`` (nothing once :attr:`finished`)."""
        if self.finished:
            return ()
        actions = self._decide(event, now)
        if any(isinstance(a, Exit) for a in actions):
            self.finished = True
            self._running = None
        return actions

    def newer(self, world: World) -> bool:
        """Whether ``world`` is news to this node (newer, or the verdict of its generation): a world
        :meth:`handle` takes rather than ignores."""
        previous = self.world
        return previous is None or (world.generation, world.status in TERMINAL) > (
            previous.generation, previous.status in TERMINAL)

    def _decide(self, event: Event, now: float) -> tuple[MemberAction, ...]:
        if isinstance(event, WorldArrived):
            return self._on_world(event.world, now)
        if isinstance(event, ProcessExited):
            return self._on_exit(event.exit)
        if isinstance(event, DaemonExited):
            return self._on_daemon_exit(event)
        if isinstance(event, SignalReceived):
            return self._on_signal(event.signum)
        if isinstance(event, Removed):
            return (StopProcesses(), *self._rejoin(event.reason, now))
        if isinstance(event, CoordinatorLost):
            return self._on_coordinator_lost(event)
        if isinstance(event, CoordinatorBack):
            self.orphaned = False
            return (Say(f"the coordinator answers again after {event.failures} failed heartbeat(s)"),)
        if isinstance(event, Fatal):
            return Say(event.message), Exit(event.exit_code)
        return self._on_tick(now)

    # --- worlds ----------------------------------------------------------------------------------

    def _on_world(self, world: World, now: float) -> tuple[MemberAction, ...]:
        if not self.newer(world):
            return ()  # older, or a second copy (a push and a heartbeat reply can both bring one)
        previous, self.world = self.world, world
        self.world_deadline = float("inf")
        self._rejoining = False
        if world.status in TERMINAL:
            return self._finish(world)
        if not world.has(self.node_id):
            return (StopProcesses(), *self._rejoin(f"generation {world.generation} does not include this node", now))
        running = self._running
        if (running is not None and previous is not None and previous.status == RUNNING
                and previous.has(self.node_id) and previous.restart_count == world.restart_count):
            return (DeliverChange(previous, world),)
        self._running = _Running(world.generation, daemon=world.distribution in SINGLE_CONTROLLER)
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
        self.world_deadline = now + delay + self.quorum_timeout + WORLD_WAIT_MARGIN
        return (Register(delay),)

    # --- processes -------------------------------------------------------------------------------

    def _on_exit(self, ended: ProcExit) -> tuple[MemberAction, ...]:
        running, world = self._running, self.world
        if world is None or running is None or ended.generation != running.generation or ended.requested:
            return ()
        running.exits[ended.local_rank] = ended
        done = len(running.exits) == self.local_world_size
        if self.orphaned:
            if ended.exit_code != 0 or done:
                return Say(f"rank {ended.rank} {ended.how} while the coordinator is "
                           f"unreachable; stopping this node"), \
                    Exit(ended.exit_code or max(e.exit_code for e in running.exits.values()))
            return ()
        if world.status != RUNNING:
            return ()
        if ended.exit_code != 0:
            self.failures += 1
            return (Report(world.generation, FAILED, exit=ended),)
        if done and all(e.exit_code == 0 for e in running.exits.values()):
            return (Report(world.generation, SUCCEEDED),)
        return ()

    def _on_daemon_exit(self, event: DaemonExited) -> tuple[MemberAction, ...]:
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

    def _on_coordinator_lost(self, event: CoordinatorLost) -> tuple[MemberAction, ...]:
        world = self.world
        lost_id, addr, _ = event.coordinator
        if world is None or world.coordinator != event.coordinator or self.coordinating:
            return ()
        survivors = [n for n in world.nodes if n.node_id != lost_id]
        running = self._running
        if running is not None and running.daemon and not self.local_world_size:
            return Say(f"the coordinator (node {lost_id} at {addr}), which runs the driver, has been unreachable "
                       f"for {event.silent_for:.1f} s; this node's {world.distribution} daemon serves nobody: "
                       f"stopping"), Exit(contract.EXIT_NODE_LOST)
        if not self.elastic or not survivors:
            self.orphaned = True
            return (Say(f"the coordinator (node {lost_id} at {addr}) has been unreachable for "
                        f"{event.silent_for:.1f} s; training continues, and this node stops when its processes end"),)
        if min(n.node_id for n in survivors) != self.node_id:
            return ()
        self.coordinating = True
        return Say(f"the coordinator (node {lost_id} at {addr}) is lost; node {self.node_id} takes over"), \
            TakeOver(world, lost_id)

    def _on_tick(self, now: float) -> tuple[MemberAction, ...]:
        if self.world is None and not self.coordinating and now > self.world_deadline:
            waited = self.quorum_timeout + WORLD_WAIT_MARGIN
            return Say(f"no world from the coordinator within {waited:g} s of registering; giving up"), \
                Exit(contract.EXIT_RENDEZVOUS)
        return ()
