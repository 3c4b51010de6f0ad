"""The coordinator's decisions: registration, quorum, liveness, world generations, job verdicts.

Pure state machine: methods take the current time and return actions (``Push`` a world to nodes,
``Say`` something to the log); the agent performs them. No I/O here, so every decision is unit
testable with a fake clock. Standard library only.

Fixed-size jobs (torchrun semantics): losing a node, silently or by a failing process, fails the generation; it
restarts as a new generation while ``max_restarts`` allows, else the job fails with the earliest failure as root
cause. Elastic jobs (``min_workers``/``max_workers``): a lost node is removed and the survivors continue in a new
generation, ranks re-packed densely in node order, as long as ``min_workers`` remain; a node that registers after
the world formed is admitted at the next generation, up to ``max_workers``; each node's failed processes are
budgeted (``budget``). Ranks that neither exit nor write, and the job's time limit: ``stragglers``.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from runtime.agent import contract
from runtime.agent.errors import MembershipRefused, NotAMember, RendezvousClosed
from runtime.agent.rendezvous.actions import CoordinatorAction, Probe, Push, Say
from runtime.agent.rendezvous.budget import FailureBudget
from runtime.agent.rendezvous.detection import Detection
from runtime.agent.rendezvous.forming import Forming
from runtime.agent.rendezvous.heartbeat import HeartbeatTiming, Liveness
from runtime.agent.rendezvous.lease import Lease
from runtime.agent.rendezvous.snapshot import members_view
from runtime.agent.rendezvous.stragglers import Stragglers
from runtime.agent.spec.agent_settings import AgentSettings
from runtime.agent.spec.status import FAILED, RUNNING, STOPPED, SUCCEEDED
from runtime.agent.world import Failure, Node, World, nodes_from


class Coordinator:
    """Rendezvous, membership and job state on the coordinating node.

    Fencing: its worlds carry its epoch; while nodes unheard for ``ttl - probe_timeout`` could form a majority
    (elastic, 3+ nodes) it holds every decision and probes them; an answer with a newer epoch, or no majority for a
    TTL, steps it down (``lease``; the nodes' half, a takeover only with a majority's votes: ``election``).

    Args:
        settings: the coordinator's agent settings (workers, quorum, elasticity, timeouts, job id).
        now: the current monotonic time, seconds.
        world: a world to take over (coordinator failover); ``None`` to start a rendezvous.
        epoch: this coordinator's epoch (1 for the first; the takeover's, elected, ``election``).
        elapsed: seconds the job has run already (a takeover's: its time limit counts on).
    """

    def __init__(self, settings: AgentSettings, now: float, *, world: Optional[World] = None, epoch: int = 1,
                 elapsed: float = 0.0) -> None:
        self._s = settings
        self._ttl = settings.spec.heartbeat_ttl
        self._job_start = now - elapsed
        self._last_tick = now
        self._graced_at = float("-inf")
        self._forming = Forming(settings.spec, now)
        self.liveness = Liveness()
        self.members: dict[int, Node] = {}
        self._dead: dict[int, float] = {}
        self.world: Optional[World] = world
        self._restart_from = world.generation if world else 1
        self._states: dict[int, str] = {}
        self._failures: list[Failure] = []
        self._budget = FailureBudget(settings.spec.max_restarts)
        self.stragglers = Stragglers(settings.spec.hang_report_after, settings.spec.timeout, self._job_start)
        self._probing: dict[int, int] = {}
        self.probe_timeout = HeartbeatTiming(settings.spec.heartbeat_interval, self._ttl).probe_timeout
        """Seconds a probe may take: a hung node is dead one TTL after its last beat at the latest (``detection``)."""
        self.lease = Lease(settings.node.node_id, epoch=epoch, ttl=self._ttl, margin=self.probe_timeout,
                           elastic=settings.spec.elastic)
        self.detection = Detection(me=settings.node.node_id, interval=settings.spec.heartbeat_interval, ttl=self._ttl,
                                   probe_timeout=self.probe_timeout, width=settings.spec.tree_fanout,
                                   threshold=settings.spec.tree_threshold)
        if world is not None:
            for n in world.nodes:
                self.members[n.node_id] = n
                self.liveness.beat(n.node_id, now)
                self._states[n.node_id] = RUNNING

    def register(self, node: Node, now: float) -> list[CoordinatorAction]:
        """A node asks to join.

        Raises:
            NotAMember: the node id is outside the job.
            MembershipRefused: the job has ended, or the world formed without the node and the job is
                not elastic or already at ``max_workers``; ``RendezvousClosed`` once a rank has exited 0.
        """
        if not 0 <= node.node_id < self._s.spec.max_nodes:
            raise NotAMember(f"node rank {node.node_id} is outside this job's 0..{self._s.spec.max_nodes - 1}")
        world = self.world
        if world is None:
            self.members[node.node_id] = node
            self._dead.pop(node.node_id, None)
            self._forming.registered(len(self.members), now)
            return self.tick(now)
        if world.status != RUNNING:
            raise MembershipRefused(f"the job has ended ({world.status})")
        if node in world.nodes:
            self.liveness.beat(node.node_id, now)
            return []
        in_world = world.has(node.node_id)
        if not self._s.spec.elastic or (not in_world and len(world.nodes) >= self._s.spec.max_nodes):
            raise MembershipRefused(f"the world formed at generation {world.generation} without node {node.node_id}")
        if (closed := self.stragglers.finishing(world)) is not None:
            raise RendezvousClosed(f"{closed}; node {node.node_id} is not admitted")
        self.members[node.node_id] = node
        self._dead.pop(node.node_id, None)
        self.liveness.beat(node.node_id, now)
        nodes = nodes_from([*(n for n in world.nodes if n.node_id != node.node_id), node])
        return self._change(world, nodes, f"node {node.node_id} ({node.addr}) joined")

    def tick(self, now: float) -> list[CoordinatorAction]:
        """Time-driven decisions: quorum progress, forming the world, quorum timeout, dead nodes."""
        self._awake(now)
        self.liveness.beat(self._s.node.node_id, now)  # the coordinator hears itself
        world = self.world
        if world is None:
            return self._tick_forming(now)
        for node_id, since in list(self._dead.items()):
            if now - since > self._ttl:
                self._dead.pop(node_id)
                self.members.pop(node_id, None)
                self.liveness.forget(node_id)
        if world.status != RUNNING:
            return []
        holding = self.lease.holding(world, lambda i: self.liveness.age(i, now), now)
        confirmed = self.lease.check(holding, now)
        if self.lease.deposed is not None or self.world is not world:
            return confirmed
        if holding:
            return self._confirm(world, now)
        said, expired = self.stragglers.check(world, now)
        if expired:
            self.world = world.finished(FAILED, expired, contract.EXIT_TIMEOUT)
            return [Say(f"job failed: {expired}"), Push(self.world, self._everyone(world))]
        probes: list[CoordinatorAction] = [*confirmed, *(Say(line) for line in said)]
        quiet = [min(self.liveness.age(n.node_id, now), now - self._graced_at) for n in world.nodes]
        for n, reason, timeout in self.detection.probes(world, quiet, self._probing):
            probes.append(self._probe(world, n, reason, timeout))
        return probes

    def watched(self) -> tuple[Node, ...]:
        """The nodes whose agent ports it watches (``watch``): those beating to it, while its world runs; else none."""
        world = self.world
        if world is None or world.status != RUNNING or self.lease.deposed is not None:
            return ()
        return tuple(self.detection.direct(world)[1].values())

    def _awake(self, now: float) -> None:
        """This coordinator runs at ``now`` (a tick, or a beat it answers); after a stall of its host (SIGSTOP) the
        others get a grace for their silence (not blamed for it), though not the lease, which must hear them anew."""
        if now - self._last_tick > self._ttl / 2:
            self._graced_at = now
        if now - self._last_tick > self._ttl and self.world is not None:  # long enough for a rival's election
            self._probing.clear()  # an answer to a probe sent before the stall is as old as the beats read after
            self.lease.stalled(self.world)
        self._last_tick = max(self._last_tick, now)

    def _confirm(self, world: World, now: float) -> list[CoordinatorAction]:
        """Holding: probe every silent node not being probed (does it count this coordinator, or know a newer one?)."""
        silent = self.lease.silent(world, lambda i: self.liveness.age(i, now))
        return [self._probe(world, world.nodes[world.node_rank_of(i)], f"confirming coordinator node "
                            f"{self._s.node.node_id}'s lease: node {i} unheard for {self.liveness.age(i, now):.1f} s "
                            f"(or only before a stall)", confirming=True)
                for i in silent if i not in self._probing]

    def _probe(self, world: World, node: Node, reason: str, timeout: Optional[float] = None, *,
               confirming: bool = False, suspicion: bool = False) -> Probe:
        """Probe ``node`` of ``world`` within ``timeout`` s (``None``: :attr:`probe_timeout`); pending until probed."""
        self._probing[node.node_id] = world.generation
        return Probe(node, reason, world.generation, timeout, confirming, self._s.node.node_id, self.lease.epoch,
                     self._last_tick, suspicion)

    def suspect(self, node_id: int, reason: str) -> list[CoordinatorAction]:
        """Something other than silence suggests a node is gone (a refused connection or push, its agent
        port's connection ended: ``watch``): probe it now; the probe decides (:meth:`probed`).

        Returns:
            A :class:`Probe`, or nothing for a node not in the world, probed already, or this coordinator's own.
        """
        world, busy = self.world, {*self._probing, self._s.node.node_id}  # a tree parent may watch the coordinator
        if world is None or world.status != RUNNING or not world.has(node_id) or node_id in busy:
            return []
        return [self._probe(world, world.nodes[world.node_rank_of(node_id)], reason, suspicion=True)]

    def probed(self, probe: Probe, alive: bool, reason: str, now: float, epoch: int = 0,
               coordinator: tuple[str, int] = ("", 0), timed_out: bool = False) -> list[CoordinatorAction]:
        """The answer to a :class:`Probe`: an agent answering in this epoch is alive; one knowing a newer epoch fences
        this coordinator out; one that did not answer is lost, unless the coordinator holds (a stall of its own since
        the last tick counts), the probe only confirmed its lease (``lease``), or a suspicion's probe ``timed_out``
        (only its silence loses that node: :class:`Probe`). An older world's answer is ignored.

        Args:
            probe: the probe answered.
            alive: whether its agent answered (``POST /probe``).
            reason: why it was probed, and how the probe failed; for the log and the new world.
            now: the current monotonic time, seconds.
            epoch: the epoch the node knows (0 when it did not answer); coordinator: its coordinator's (address, port).
            timed_out: the probe got no answer in time (not refused, reset or answered with an error).
        """
        node_id = probe.node.node_id
        self._awake(now)
        if self._probing.get(node_id) != probe.generation:
            return []
        del self._probing[node_id]
        if self.lease.newer(epoch, f"node {node_id} knows epoch {epoch}, past this coordinator's "
                                   f"{self.lease.epoch}", coordinator):
            return self.lease.check(True, now)
        world = self.world
        if world is None or world.generation != probe.generation or world.status != RUNNING:
            return []
        if alive:
            self.liveness.beat(node_id, now, now - probe.asked)  # heard as of the asking (Probe.asked)
            self.lease.confirmed(node_id)
            return []
        if probe.confirming or self.lease.holding(world, lambda i: self.liveness.age(i, now), now):
            return []  # a silence seen while a majority was unheard: the silence path decides once it ends
        if probe.suspicion and timed_out:
            return [Say(f"{reason}; node {node_id} stays unless its heartbeats stop")]
        if probe.timeout is not None and self.detection.quiet_majority(
                world, [min(self.liveness.age(n.node_id, now), now - self._graced_at) for n in world.nodes]):
            return []  # a quick probe: with a majority quiet, the silence path decides (tick)
        self._dead[node_id] = now
        return self.lose(node_id, reason)

    def _tick_forming(self, now: float) -> list[CoordinatorAction]:
        step = self._forming.step(sorted(self.members), now)
        actions: list[CoordinatorAction] = [Say(step.progress)] if step.progress else []
        if step.form:
            self.world = self._world(nodes_from(self.members.values()), 0)
            self._begin_restart(self.world)
            for n in self.world.nodes:
                self.liveness.beat(n.node_id, now)
            return [*actions, Push(self.world, self.world.nodes)]
        if step.timeout is not None:
            world = self._world(nodes_from(self.members.values()), 0).finished(
                FAILED, str(step.timeout), contract.EXIT_RENDEZVOUS)
            self.world = world
            return [*actions, Say(str(step.timeout)), Push(world, world.nodes)]
        return actions

    def _world(self, nodes: tuple[Node, ...], restart_count: int) -> World:
        return World(
            job=self._s.spec.job_name or "", generation=self.world.generation + 1 if self.world else 1,  # job: required
            restart_count=restart_count, max_restarts=self._s.spec.max_restarts, nodes=nodes,
            master_port=self._s.spec.master_port, distribution=self._s.spec.distribution,
            coordinator=(self._s.node.node_id, self._s.node.advertise_address, self._s.node.agent_port),
            epoch=self.lease.epoch,
            job_elapsed=round(max(0.0, self._last_tick - self._job_start), 3),
        )

    def _begin_restart(self, world: World) -> None:
        self._restart_from = world.generation
        self._states = {n.node_id: RUNNING for n in world.nodes}
        self._failures = []

    # --- liveness and reports --------------------------------------------------------------------

    def heartbeat(self, node_id: int, ages: Mapping[int, float], now: float, epoch: int = 1) -> None:
        """A member (or an aggregating parent, with its subtree's ``node_id -> age``) is alive.

        A registered node still waiting for its first world may beat too (its reply carries the world once formed,
        so a lost push heals itself). A beat carrying a newer ``epoch`` (its node voted for another candidate) is no
        proof of life for this coordinator's lease (``lease``). Answering beats, this coordinator runs: a main
        thread busy meanwhile (its ranks slow to stop) is no stall of its host (:meth:`_awake`).

        Raises:
            MembershipRefused: ``node_id`` is not in the current world (it should register again).
        """
        self._awake(now)
        if epoch > self.lease.epoch:
            return
        world = self.world
        if world is None and node_id in self.members:
            return
        if world is None or not world.has(node_id):
            raise MembershipRefused(f"node {node_id} is not in the current world; register again")
        self.liveness.beat(node_id, now)
        self.liveness.merge({k: v for k, v in ages.items() if world.has(k)}, now)

    def activity(self, node_id: int, generation: int, ranks: Sequence[Sequence[Any]], now: float) -> None:
        """Node ``node_id``'s ranks in ``generation``, ``[rank, exit code or null, seconds silent]`` each
        (with its heartbeat; the coordinator's own node's with every tick), for ``stragglers``."""
        world = self.world
        if world is not None and world.generation == generation and world.has(node_id):
            self.stragglers.note(node_id, ranks, generation, now)

    def delivered(self, node_id: int, generation: int, now: float) -> None:
        """A node accepted the push of world ``generation``: its answer is proof of life.

        Pushing a large world takes a while (every node receives and parses it), and a node's first heartbeat comes
        only after it has the world, so without this a node that got its push late could be declared dead for the
        push's delay. A push of an older world counts for nothing."""
        world = self.world
        if world is not None and world.generation == generation and world.has(node_id):
            self.liveness.beat(node_id, now)

    def report(self, node_id: int, generation: int, state: str, failure: Optional[Failure] = None, message: str = "",
               now: Optional[float] = None) -> list[CoordinatorAction]:
        """A node's processes changed state; held while the coordinator holds (``lease``).

        Args:
            node_id: the reporting node.
            generation: the generation the node was in; reports from before the current restart
                epoch are stale and ignored.
            state: ``succeeded`` (all its processes exited 0), ``failed`` (one exited non-zero, or its
                framework daemon did; ``failure`` says which) or ``stopped`` (the node is shutting
                down; ``message`` says why). The job succeeds once every node with processes has
                succeeded: nodes without (a single-controller job's daemon-only nodes) do not vote.
            failure: the failing process, for ``failed``.
            message: the reason, for ``stopped``.
            now: the current monotonic time, seconds (``None``: the last tick's).
        """
        world = self.world
        if now is not None:
            self._awake(now)
        if world is not None and world.status == RUNNING and \
                self.lease.holding(world, lambda i: self.liveness.age(i, self._last_tick), self._last_tick):
            self.lease.hold(lambda: self.report(node_id, generation, state, failure, message))
            return []
        if world is None or world.status != RUNNING or generation < self._restart_from or node_id not in self._states:
            return []
        if state == SUCCEEDED:
            self._states[node_id] = SUCCEEDED
            if all(self._states.get(n.node_id) == SUCCEEDED for n in world.nodes if n.num_proc):
                self.world = world.finished(SUCCEEDED, "every rank exited 0", contract.EXIT_OK)
                return [Say("job succeeded: every rank exited 0"), Push(self.world, self._everyone(world))]
            return []
        if state == FAILED and failure is not None:
            return self.lose(node_id, failure.describe(), failure, alive=True)
        if state == STOPPED:
            return self.lose(node_id, f"node {node_id} stopped: {message}", alive=True)
        return []

    def lose(self, node_id: int, reason: str, failure: Optional[Failure] = None,
             alive: bool = False) -> list[CoordinatorAction]:
        """A node is gone: elastic jobs continue without it, fixed-size jobs restart or fail.

        Args:
            node_id: the lost node.
            reason: what happened, for the log and the verdict.
            failure: the failing process, when a process exit caused the loss.
            alive: the node's agent is still up (it reported), so it is told the new world too.
        """
        world = self.world
        if world is None or not world.has(node_id):
            return []
        survivors = tuple(n for n in world.nodes if n.node_id != node_id)
        spent = failure is not None and self._s.spec.elastic and self._budget.spend(node_id)
        if self._s.spec.elastic and len(survivors) >= self._s.spec.min_nodes and not spent:
            self._states.pop(node_id, None)
            lost = tuple(n for n in world.nodes if n.node_id == node_id) if alive else ()
            return self._change(world, survivors, reason, extra_targets=lost)
        self._failures.append(
            failure or Failure(rank=-1, node_id=node_id, local_rank=-1, exit_code=contract.EXIT_NODE_LOST, addr=reason)
        )
        if not spent and world.restart_count < self._s.spec.max_restarts:
            self.world = self._world(world.nodes, world.restart_count + 1)
            self._begin_restart(self.world)
            return [
                Say(f"{reason}\nrestarting ({self.world.restart_count}/{self._s.spec.max_restarts}) "
                    f"as generation {self.world.generation}"),
                Push(self.world, world.nodes),
            ]
        cause = failure if spent and failure is not None else min(self._failures, key=lambda f: (f.timestamp, f.rank))
        known = cause.rank >= 0 or bool(cause.daemon)
        message = cause.describe() if known else reason
        if spent:
            message = (f"node {node_id}'s processes failed {self._budget.failures(node_id)} time(s), past its budget "
                       f"(max_restarts {self._s.spec.max_restarts}); the last: {message}")
        self.world = world.finished(FAILED, message, cause.exit_code or 1, cause if known else None)
        return [Say(f"job failed: {message}"), Push(self.world, self._everyone(world))]

    def _everyone(self, world: World) -> tuple[Node, ...]:
        """The world's nodes and every other node still known (e.g. one waiting to rejoin): all are told the verdict."""
        known = {n.node_id: n for n in self.members.values() if n.node_id not in self._dead}
        known.update({n.node_id: n for n in world.nodes})
        return nodes_from(known.values())

    def _change(self, world: World, nodes: tuple[Node, ...], reason: str,
                extra_targets: tuple[Node, ...] = ()) -> list[CoordinatorAction]:
        """A membership change: same restart epoch, new generation, ranks re-packed."""
        self.world = self._world(nodes, world.restart_count)
        for n in nodes:
            self._states.setdefault(n.node_id, RUNNING)
        return [Say(f"{reason}; generation {self.world.generation}: {len(nodes)} node(s), world size "
                    f"{self.world.world_size}"), Push(self.world, nodes + extra_targets)]

    def stop(self, message: str, exit_code: int) -> list[CoordinatorAction]:
        """The coordinator is shutting down (signal): stop every node."""
        base = self.world or self._world(nodes_from(self.members.values()), 0)
        self.world = base.finished(STOPPED, message, exit_code)
        return [Push(self.world, self._everyone(base))]

    # --- views -----------------------------------------------------------------------------------

    def snapshot(self, now: float) -> dict[str, Any]:
        """The membership view served at ``GET /members`` (``snapshot.members_view``)."""
        return members_view(self._s.spec, self.world, self.members, self._dead, self._states,
                            lambda i: self.liveness.age(i, now), self.lease.epoch, self.lease.deposed is not None)
