"""A whole job of real ``Agent`` s in one process: no sockets, no user processes, no sleeping.

:class:`InMemoryJob` runs N agents, each in a thread, on one ``transport.FakeNetwork`` (its routes
served there, a ``FakeTransport`` to reach the others), with :class:`FakeProcesses` for its user
processes (they run until the test ends them, with a code or a signal) and one :class:`FakeClock` for
all, which only the test moves. Everything between (``Member``, ``Coordinator``, registration,
heartbeats, pushes, probes, votes, the coordinator's watch, reports, world files) is the production
code. A killed node stops answering (its address refuses, its watchers are told, it reaches nobody)
and its agent's thread ends; a paused (SIGSTOPped) one neither answers nor sends until it resumes.
Every thread of the job waits on the fake clock (the agents' ``wait`` seam, the network's), and the
clock moves a step only once all of them wait again, so what a step set off is done before the next.
"""

from __future__ import annotations

import io
import json
import math
import signal
import threading
import time
from typing import Any, Callable, NamedTuple, Optional

from runtime.agent import contract
from runtime.agent.agent import Agent
from runtime.agent.execution.delivery import DELIVERY_SIGNAL
from runtime.agent.execution.procs import ProcExit
from runtime.agent.net.peer import Exchange
from testbed.settings import agent_settings
from testbed.transport import FakeNetwork, FakeTransport

POLL = 0.002
"""Real seconds between two looks of a thread waiting on the fake clock at its event."""
PORT = 32300
"""Every node's agent port."""


class Held(NamedTuple):
    """The world a node's ``Member`` holds (zeros and no nodes before one)."""

    generation: int
    world_size: int
    node_ids: list[int]


class FakeClock:
    """A monotonic clock only :meth:`advance` moves, and waits on it (an ``Agent``'s ``wait`` seam).

    Args:
        start: the clock's first reading, seconds.
    """

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._cond = threading.Condition()
        self._waiting: dict[threading.Thread, tuple[float, threading.Event]] = {}

    def __call__(self) -> float:
        """The current reading, seconds."""
        with self._cond:
            return self._now

    def wait(self, event: threading.Event, timeout: Optional[float]) -> bool:
        """Wait until ``event`` is set or ``timeout`` fake seconds pass (``None``: no limit); whether it was set."""
        me = threading.current_thread()
        with self._cond:
            deadline = self._now + (math.inf if timeout is None else timeout)
            self._waiting[me] = (deadline, event)
            self._cond.notify_all()
            try:
                while not event.is_set() and self._now < deadline:
                    self._cond.wait(POLL)
                return event.is_set()
            finally:
                del self._waiting[me]
                self._cond.notify_all()

    def waiting(self, thread: threading.Thread) -> bool:
        """Whether ``thread`` waits on this clock, for an event not set and a time still to come."""
        with self._cond:
            waiting = self._waiting.get(thread)
            return waiting is not None and waiting[0] > self._now and not waiting[1].is_set()

    def advance(self, seconds: float, step: float = 0.05, idle: Callable[[], bool] = lambda: True,
                settle: float = 10.0) -> None:
        """Move the clock ``seconds`` forward, ``step`` at a time, each step once ``idle()`` holds again
        (a thread whose wait a step ended has done what it woke for).

        Raises:
            TimeoutError: ``idle()`` did not hold within ``settle`` real seconds of a step.
        """
        target = self() + seconds
        while self() < target:
            with self._cond:
                self._now = min(self._now + step, target)
                self._cond.notify_all()
            end = time.monotonic() + settle
            while not idle():
                if time.monotonic() > end:
                    raise TimeoutError(f"still busy {settle:g} s after the clock moved to {self():.2f}")
                with self._cond:
                    self._cond.wait(POLL)


class FakeProcesses:
    """One generation's user processes on one node, which run until :meth:`exit` (a ``Supervisor``,
    built by the spawner seam with ``LocalProcesses``' keyword arguments).

    Attributes:
        generation: the world generation they run in.
        first_rank: the global rank of local rank 0.
        running: whether each local rank still runs.
        told: what each delivery of a membership change said, as the rank read its world file:
            ``(local rank, world_file(local rank))``.
    """

    def __init__(self, *, generation: int, first_rank: int, envs: list[dict[str, str]],
                 on_exit: Callable[[ProcExit], None], **_kwargs: object) -> None:
        self.generation = generation
        self.first_rank = first_rank
        self._envs = envs
        self._on_exit = on_exit
        self.running = [False] * len(envs)
        self.codes: dict[int, int] = {}
        self.told: list[tuple[int, dict[str, Any]]] = []
        self._lock = threading.Lock()

    def start(self) -> None:
        """Every rank runs."""
        with self._lock:
            self.running = [True] * len(self._envs)

    def exit(self, local_rank: int = 0, code: int = 0, sig: int = 0, requested: bool = False) -> None:
        """Local rank ``local_rank`` ends: with ``code``, or killed by signal ``sig`` (code 128 + ``sig``)."""
        with self._lock:
            if not self.running[local_rank]:
                return
            self.running[local_rank] = False
            self.codes[local_rank] = contract.EXIT_INTERRUPTED_BASE + sig if sig else code
        self._on_exit(ProcExit(self.generation, local_rank, self.first_rank + local_rank, self.codes[local_rank], (),
                               time.time(), requested, sig))

    def stop(self, grace: float, sig: int = signal.SIGTERM) -> None:
        """The agent stops them: each running rank ends by ``sig``, as asked."""
        for local_rank in range(len(self._envs)):
            self.exit(local_rank, sig=sig, requested=True)

    def send(self, local_rank: int, sig: int) -> bool:
        """A signal to one rank; a membership change's is read as the rank's handler would, from its world file."""
        with self._lock:
            if not self.running[local_rank]:
                return False
        if sig == DELIVERY_SIGNAL:
            self.told.append((local_rank, self.world_file(local_rank)))
        return True

    def world_file(self, local_rank: int) -> dict[str, Any]:
        """What local rank ``local_rank``'s world file says now: ``generation``, ``rank``, ``world_size``,
        ``master`` (its ``MASTER_ADDR``), ``added`` and ``removed`` (addresses).

        Raises:
            OSError: the file cannot be read.
        """
        with open(self._envs[local_rank][contract.TRAINPLANE_WORLD_FILE]) as f:
            state = json.load(f)
        env = state["env"]
        return {"generation": state["generation"], "rank": int(env["RANK"]), "world_size": int(env["WORLD_SIZE"]),
                "master": env["MASTER_ADDR"], "added": state["added_ips"], "removed": state["removed_ips"]}

    def activity(self) -> list[tuple[int, Optional[int], float]]:
        """Each rank, its exit code once it ended (``None`` while it runs), and no silence."""
        with self._lock:
            return [(self.first_rank + i, self.codes.get(i), 0.0) for i in range(len(self._envs))]

    def renumber(self, first_rank: int) -> None:
        """The ranks moved: local rank 0 is now ``first_rank``."""
        self.first_rank = first_rank


class InMemoryJob:
    """``nodes`` agents of one job on a fake network, processes and clock.

    Node ``i`` is at ``10.0.0.i``; node 0 coordinates. ``settings`` go to every agent
    (``testbed.settings.agent_settings``); ``run_root`` keeps the world files (a temporary directory).

    Args:
        nodes: the nodes started now (node ids ``0 .. nodes-1``).
        run_root: directory for the agents' run directories.
        settings: agent settings by name.
    """

    def __init__(self, nodes: int, run_root: str, **settings: Any) -> None:
        self.clock = FakeClock()
        self.network = FakeNetwork(self.clock.wait)
        self._settings = {"workers": nodes, "coordinator": "10.0.0.0", "agent_port": PORT, "coordinator_port": PORT,
                          "run_root": run_root, **settings}
        self.agents: dict[int, Agent] = {}
        self.transports: dict[int, FakeTransport] = {}
        self.generations: dict[int, list[FakeProcesses]] = {}
        self.codes: dict[int, int] = {}
        self._logs: dict[int, io.StringIO] = {}
        self._threads: dict[int, threading.Thread] = {}
        self._before = set(threading.enumerate())
        for node_id in range(nodes):
            self.add(node_id)

    @staticmethod
    def address(node_id: int) -> str:
        """Node ``node_id``'s address."""
        return f"10.0.0.{node_id}"

    def add(self, node_id: int) -> Agent:
        """Start node ``node_id``'s agent in a thread of its own; returns it."""
        settings = agent_settings(**self._settings, node_id=node_id, advertise_address=self.address(node_id),
                                  bind_address=self.address(node_id))
        self.transports[node_id] = transport = FakeTransport(self.network, settings.token, self.clock)
        self.generations[node_id] = []
        self._logs[node_id] = io.StringIO()

        def spawn(**kwargs: Any) -> FakeProcesses:
            processes = FakeProcesses(**kwargs)
            self.generations[node_id].append(processes)
            return processes

        agent = Agent(settings, log=self._logs[node_id], clock=self.clock, spawner=spawn, transport=transport,
                      server=self.network.server, wait=self.clock.wait)
        self.agents[node_id] = agent
        thread = threading.Thread(target=self._run, args=(node_id, agent), name=f"agent-{node_id}", daemon=True)
        self._threads[node_id] = thread
        thread.start()
        return agent

    def _run(self, node_id: int, agent: Agent) -> None:
        self.codes[node_id] = agent.run()

    def processes(self, node_id: int) -> Optional[FakeProcesses]:
        """Node ``node_id``'s latest generation of processes, if it started one."""
        started = self.generations[node_id]
        return started[-1] if started else None

    def exit(self, node_id: int, code: int = 0, sig: int = 0, local_rank: int = 0) -> None:
        """Node ``node_id``'s running rank ``local_rank`` ends with ``code`` (or by signal ``sig``).

        Raises:
            LookupError: the node runs no processes.
        """
        processes = self.processes(node_id)
        if processes is None:
            raise LookupError(f"node {node_id} runs no processes")
        processes.exit(local_rank, code, sig)

    def finish(self) -> None:
        """Every running rank of every node exits 0."""
        for started in list(self.generations.values()):
            for processes in started:
                for local_rank, running in enumerate(processes.running):
                    if running:
                        processes.exit(local_rank, 0)

    def kill(self, node_id: int) -> None:
        """Node ``node_id``'s agent dies: its address refuses, it reaches nobody, its thread ends."""
        self.transports[node_id].cut()
        self.network.stop(self.address(node_id), PORT)
        self.agents[node_id].send_signal(signal.SIGTERM)

    def pause(self, node_id: int) -> None:
        """Node ``node_id``'s agent is SIGSTOPped: it answers nothing and sends nothing (both wait) until
        :meth:`resume`; its address still takes connections, so no watch sees it go."""
        self.transports[node_id].hold()
        self.network.pause(self.address(node_id), PORT)

    def resume(self, node_id: int) -> None:
        """Node ``node_id``'s agent goes on (SIGCONT): what waited is answered and sent."""
        self.network.resume(self.address(node_id), PORT)
        self.transports[node_id].release()

    def world(self, node_id: int) -> Held:
        """The world node ``node_id``'s ``Member`` holds."""
        world = self.agents[node_id].member.view.world
        if world is None:
            return Held(0, 0, [])
        return Held(world.generation, world.world_size, [n.node_id for n in world.nodes])

    def members(self, node_id: int = 0) -> dict[str, Any]:
        """``GET /members`` of node ``node_id`` (the coordinator's snapshot), over the fake network."""
        exchange = Exchange(self.address(node_id), PORT, "GET", contract.ROUTE_MEMBERS)
        return self.network.answer(exchange, self.transports[node_id].token).result(exchange)

    def log(self, node_id: int) -> str:
        """Everything node ``node_id``'s agent said."""
        return self._logs[node_id].getvalue()

    def ended(self, node_id: int) -> bool:
        """Whether node ``node_id``'s agent returned from ``run()`` (its code in :attr:`codes`)."""
        return not self._threads[node_id].is_alive()

    def idle(self) -> bool:
        """Nothing is under way: every thread this job started (an agent's loop, heartbeats, a
        registration, a push, a probe, a vote) waits on the fake clock or has ended."""
        return all(t in self._before or self.clock.waiting(t) for t in threading.enumerate())

    def until(self, condition: Callable[[], bool], within: float, step: float = 0.05, real: float = 10.0) -> bool:
        """Advance the fake clock ``step`` at a time until ``condition()`` holds, for at most ``within``
        fake seconds and ``real`` real ones; whether it holds."""
        deadline, end = self.clock() + within, time.monotonic() + real
        while not condition():
            if self.clock() >= deadline or time.monotonic() > end:
                return condition()
            self.clock.advance(step, step, self.idle)
        return True

    def wait(self, condition: Callable[[], bool], real: float = 10.0) -> bool:
        """Wait, the fake clock still, until ``condition()`` holds, or the job is :meth:`idle` (nothing more
        happens until the clock moves), at most ``real`` real seconds; whether it holds."""
        end = time.monotonic() + real
        while not condition():
            if self.idle() or time.monotonic() > end:
                return condition()
            time.sleep(POLL)
        return True

    def close(self, timeout: float = 10.0) -> None:
        """Stop every agent still running (SIGTERM) and wait for its thread."""
        for node_id, thread in self._threads.items():
            if thread.is_alive():
                self.agents[node_id].send_signal(signal.SIGTERM)
        for thread in self._threads.values():
            thread.join(timeout)
