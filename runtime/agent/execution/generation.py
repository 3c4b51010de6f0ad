"""One node's share of a generation: start and stop its processes and framework daemon, tell them
of membership changes, signal them, and describe a failure. Standard library only.

What each process gets: the agent's environment minus its own settings (``procs.inherited_env``), the
world's contract (``environment.process_env``), what torchrun's agent adds (``torchrun.worker_env``),
a single-controller driver's wait (``controller.driver_wait``), and its world file
(``delivery.write``), which a membership change rewrites before the delivery signal.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from runtime.agent import contract
from runtime.agent.errors import WorkerMembershipChanged
from runtime.agent.execution import controller, delivery, errorfile, torchrun
from runtime.agent.execution.environment import process_env
from runtime.agent.execution.procs import LocalProcesses, ProcExit, Spawner, Supervisor, inherited_env, rank_dir
from runtime.agent.spec.agent_settings import AgentSettings
from runtime.agent.world import Failure, World

if TYPE_CHECKING:
    from runtime.agent.service.dispatch import ServiceNode

DAEMON_MODULE = "runtime.agent.execution.daemon"
"""What a framework daemon's process runs under the bootstrap, before it becomes the daemon."""
TORCH = ("pytorch", "spmd")
"""Distributions whose ranks may form a torch.distributed group with ``env://``."""
MEANWHILE = 0.1
"""Seconds between the calls of :meth:`NodeProcesses.stop`'s ``meanwhile`` while processes take time to stop."""
KEEP_GENERATIONS = 20
"""Per-generation log directories (``<log dir>/gen-G``) a node keeps: starting a generation removes
the oldest beyond the newest this many, so restarts and membership changes cannot pile them up."""


def change(previous: World, world: World) -> WorkerMembershipChanged:
    """The membership change from ``previous`` to ``world``, by node address."""
    return WorkerMembershipChanged.between([n.addr for n in previous.nodes], [n.addr for n in world.nodes],
                                           world.generation)


def prune_generations(log_dir: str, keep: int = KEEP_GENERATIONS) -> None:
    """Remove the oldest ``gen-G`` directories in ``log_dir`` beyond the newest ``keep - 1`` (room for
    the one about to start)."""
    try:
        found = [(int(e.name[4:]), e.path) for e in os.scandir(log_dir)
                 if e.name.startswith("gen-") and e.name[4:].isdigit() and e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return
    for _, path in sorted(found)[:max(0, len(found) - keep + 1)]:
        shutil.rmtree(path, ignore_errors=True)


class NodeProcesses:
    """This node's processes, generation after generation.

    Args:
        settings: the agent's settings.
        spawner: builds the supervisor of one generation's processes (``procs.LocalProcesses``, or a
            benchmark's stand-in that runs nothing).
        say: writes one line to the agent's log.
        on_exit: called (from a watcher thread) when a user process ends.
        on_daemon_exit: called with the daemon's name when the framework daemon ends.
        service: service mode's dispatch, which takes the worker processes as its executor and whose
            calls in flight a membership change fails.
        environ: the agent's own environment, which the processes inherit (less the agent's settings).
    """

    def __init__(self, *, settings: AgentSettings, spawner: Spawner, say: Callable[[str], None],
                 on_exit: Callable[[ProcExit], None], on_daemon_exit: Callable[[str, ProcExit], None],
                 service: Optional[ServiceNode] = None, environ: Optional[dict[str, str]] = None) -> None:
        self._settings = settings
        self._spawner = spawner
        self._say = say
        self._on_exit = on_exit
        self._on_daemon_exit = on_daemon_exit
        self._service = service
        self._environ = dict(os.environ) if environ is None else environ
        self._num_proc = settings.local_world_size
        self._procs: Optional[Supervisor] = None
        self._daemon: Optional[Supervisor] = None
        self._error_files: list[str] = []
        self._omp_said = False
        plumbing = settings.plumbing
        if plumbing.run_root:
            os.makedirs(plumbing.run_root, exist_ok=True)
        self._run_dir = tempfile.mkdtemp(prefix=f"trainplane-{settings.spec.job_name}-{settings.node.node_id}-",
                                         dir=plumbing.run_root)

    def start(self, world: World) -> None:
        """Start this node's processes (and its framework daemon) for ``world``.

        Raises:
            OSError: a process could not be started.
        """
        node_rank = world.node_rank_of(self._settings.node.node_id)
        spec = self._settings.spec
        base = inherited_env(self._environ)
        unchanged = change(world, world)
        wait = self._driver_wait(world)
        log_dir = os.path.join(spec.log_dir, f"gen-{world.generation}") if spec.log_dir else None
        if spec.log_dir:
            prune_generations(spec.log_dir)
        self._error_files, envs = [], []
        for i in range(self._num_proc):
            delivery.write(self._world_file(i), unchanged, self._process_env(world, i))
            error_file = self._error_file(log_dir, world.generation, i)
            envs.append({
                **base, **self._process_env(world, i), **wait,
                **torchrun.worker_env(base, i, self._num_proc, spec.signals_to_handle, error_file,
                                      spec.virtual_local_rank),
                contract.TRAINPLANE_WORLD_FILE: self._world_file(i),
                contract.MONITOR_MEMBERS: "true" if spec.monitor_members else "false",
                **self._join_env(),
            })
        if torchrun.omp_num_threads(base, self._num_proc) is not None and not self._omp_said:
            self._omp_said = True
            self._say(torchrun.omp_notice(self._num_proc))
        daemon = controller.daemon(world, node_rank, prefix=self._settings.plumbing.daemon_prefix,
                                   extra_args=spec.daemon_args)
        if daemon is not None:
            self._daemon = self._spawn_daemon(world, node_rank, daemon, base, log_dir)
        self._procs = self._spawn(world, node_rank, envs, log_dir)
        first = world.first_rank(node_rank)
        runs = f"ranks {first}..{first + self._num_proc - 1} of {world.world_size}"
        if daemon is not None:
            runs = f"the {daemon.name}" + (f" and the driver (rank {first} of {world.world_size})"
                                           if self._num_proc else "")
        self._say(f"generation {world.generation}: node rank {node_rank} of {len(world.nodes)} runs {runs}, "
                  f"master {world.master_addr}:{world.rendezvous_port} (agent pid {os.getpid()})")
        if self._daemon is not None:
            self._daemon.start()
        self._procs.start()

    def stop(self, sig: int = signal.SIGTERM, meanwhile: Optional[Callable[[], None]] = None) -> None:
        """Stop the processes and the daemon, if any: ``sig`` (SIGTERM unless a stop signal is being
        passed on), then SIGKILL after the grace period. Their exits are not failures.

        Args:
            sig: the first signal sent.
            meanwhile: called on this thread about every :data:`MEANWHILE` seconds (real time) for as long as the
                processes take to stop (the stop then runs in a thread of its own, which also writes the
                "torn down" line), so that the caller's work goes on: the coordinator's decisions, while its
                node's ranks are slow to stop. They count as gone already (:meth:`activity` is empty).

        Raises:
            OSError: a process could not be signalled or reaped (every supervisor is stopped first);
                whatever ``meanwhile`` raised, once the stop has finished.
        """
        supervisors = [s for s in (self._procs, self._daemon) if s is not None]
        self._procs = self._daemon = None
        failed: list[BaseException] = []
        if meanwhile is None or not supervisors:
            self._stop(supervisors, sig, failed)
        else:
            stopper = threading.Thread(target=self._stop, args=(supervisors, sig, failed), name="stop", daemon=True)
            stopper.start()
            try:
                stopper.join(MEANWHILE)
                while stopper.is_alive():
                    meanwhile()
                    stopper.join(MEANWHILE)
            finally:
                stopper.join()  # nothing is left running behind an error of meanwhile's
        if failed:
            raise failed[0]

    def _stop(self, supervisors: list[Supervisor], sig: int, failed: list[BaseException]) -> None:
        """Stop each supervisor, whatever the one before raised; what they raised goes to ``failed``."""
        for supervisor in supervisors:
            try:
                supervisor.stop(self._settings.spec.grace_period, sig)
            except BaseException as exc:  # the next supervisor is stopped all the same; re-raised below
                failed.append(exc)
                continue
            if isinstance(supervisor, LocalProcesses) and supervisor.torn_down:
                self._say(f"generation {supervisor.generation} torn down: {'; '.join(supervisor.torn_down)}")

    def deliver(self, previous: World, world: World) -> None:
        """Tell the live processes about the new world (world file, then the delivery signal); in service
        mode, fail the calls in flight with the change."""
        news = change(previous, world)
        if self._service is not None:
            self._service.fail_in_flight(news)
        if self._procs is None:
            return
        self._procs.renumber(world.first_rank(world.node_rank_of(self._settings.node.node_id)))
        for local_rank in range(self._num_proc):
            delivery.write(self._world_file(local_rank), news, self._process_env(world, local_rank))
            if self._settings.spec.monitor_members:
                self._procs.send(local_rank, delivery.DELIVERY_SIGNAL)

    def activity(self) -> list[tuple[int, Optional[int], float]]:
        """This node's ranks as the straggler report takes them (``Supervisor.activity``); none for a
        service job's worker pool, a spawner that runs nothing, or before a generation."""
        procs = self._procs  # the main thread may clear it meanwhile
        return procs.activity() if procs is not None else []

    def send(self, sig: int) -> list[int]:
        """Send ``sig`` to every process still running; the local ranks it reached."""
        procs = self._procs
        return [i for i in range(self._num_proc) if procs is not None and procs.send(i, sig)]

    def failure(self, ended: ProcExit, daemon: str = "") -> Failure:
        """The failure report of a process that exited non-zero (a rank, or the ``daemon``): its recorded
        exception (``TORCHELASTIC_ERROR_FILE``) when it wrote one, else its stderr tail."""
        local_rank = -1 if daemon else ended.local_rank
        recorded = errorfile.read(self._error_files[local_rank]) if 0 <= local_rank < len(self._error_files) else None
        node = self._settings.node
        return Failure(
            rank=-1 if daemon else ended.rank, node_id=node.node_id, local_rank=local_rank,
            exit_code=ended.exit_code, signal=ended.signal, stderr_tail=ended.stderr_tail, timestamp=ended.timestamp,
            addr=node.advertise_address, daemon=daemon, error=recorded.describe() if recorded else "",
            error_traceback=recorded.traceback if recorded else (),
        )

    def close(self) -> None:
        """Stop everything and remove this agent's run directory."""
        self.stop()
        shutil.rmtree(self._run_dir, ignore_errors=True)

    def _spawn(self, world: World, node_rank: int, envs: list[dict[str, str]], log_dir: Optional[str]) -> Supervisor:
        spec, first = self._settings.spec, world.first_rank(node_rank)
        if self._service is not None:
            from runtime.agent.service.pool import WorkerPool  # service mode's: imported with its dispatch

            pool = WorkerPool(generation=world.generation, node_rank=node_rank, first_rank=first, envs=envs,
                              say=self._say, grace=spec.grace_period, log_dir=log_dir)
            self._service.use_executor(pool)
            return pool
        stdin = 0 if self._settings.plumbing.forward_stdin and first == 0 else None
        return self._spawner(generation=world.generation, first_rank=first, envs=envs, entrypoint=spec.entrypoint,
                             on_exit=self._on_exit, log_dir=log_dir, no_python=spec.no_python, outputs=spec.outputs,
                             stdin_local_rank=stdin)

    def _spawn_daemon(self, world: World, node_rank: int, daemon: controller.Daemon, base: dict[str, str],
                      log_dir: Optional[str]) -> Supervisor:
        """The supervisor of this node's framework daemon, not yet started: :data:`DAEMON_MODULE` under
        the bootstrap, which waits for the head if the daemon needs it, then becomes the daemon."""
        env = dict(base)  # the daemon ignores membership changes itself (execution.daemon)
        if daemon.wait_for:
            env[contract.WAIT_FOR] = daemon.wait_for
        return self._spawner(
            generation=world.generation, first_rank=node_rank, envs=[env],
            entrypoint=("-m", DAEMON_MODULE, daemon.name, *daemon.argv),
            on_exit=lambda ended: self._on_daemon_exit(daemon.name, ended), log_dir=log_dir, label=daemon.name,
        )

    def _join_env(self) -> dict[str, str]:
        """``TRAINPLANE_JOIN_TIMEOUT`` (the quorum timeout) for the ranks of an elastic torch batch job, whose
        new worlds' ranks wait that long for a joining node's (``execution.torchhooks``); nothing otherwise."""
        spec = self._settings.spec
        if not spec.elastic or self._service is not None or spec.no_python or spec.distribution not in TORCH:
            return {}
        return {contract.JOIN_TIMEOUT: f"{spec.quorum_timeout:g}"}

    def _world_file(self, local_rank: int) -> str:
        return os.path.join(self._run_dir, f"world-{local_rank}.json")

    def _driver_wait(self, world: World) -> dict[str, str]:
        """A single-controller driver's bootstrap settings: what it waits for, for how long."""
        wait = controller.driver_wait(world)
        if not wait.endpoints:
            return {}
        env = {contract.WAIT_FOR: ",".join(wait.endpoints),
               contract.WAIT_TIMEOUT: str(self._settings.spec.quorum_timeout)}
        if wait.ray_nodes:
            env[contract.WAIT_RAY_NODES] = ",".join(wait.ray_nodes)
        return env

    def _process_env(self, world: World, local_rank: int) -> dict[str, str]:
        """The world's part of one process's environment (what a membership change updates)."""
        spec = self._settings.spec
        env = process_env(world, world.node_rank_of(self._settings.node.node_id), local_rank, spec.role)
        if spec.virtual_local_rank:
            env[contract.LOCAL_RANK] = "0"
        return env

    def _error_file(self, log_dir: Optional[str], generation: int, local_rank: int) -> str:
        """Where a process's ``@record`` writes its exception (``TORCHELASTIC_ERROR_FILE``): beside its
        logs, as torchrun keeps it, else in this agent's run directory; a restart's process starts
        without its predecessor's."""
        parent = Path(log_dir) if log_dir else Path(self._run_dir, f"gen-{generation}")
        path = rank_dir(parent, local_rank) / "error.json"
        os.makedirs(path.parent, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
        self._error_files.append(str(path))
        return str(path)
