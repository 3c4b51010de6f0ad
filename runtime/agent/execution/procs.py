"""Supervision of one node's user processes for one generation. Standard library only.

Each process runs in its own session (so teardown reaches everything it spawned), under the
bootstrap (``runtime.agent.execution.bootstrap``) that ties its life to the agent's (a command run without
Python replaces the bootstrap, keeping its pid and parent-death signal). Its output is copied to
the agent's stdout/stderr with a ``[rank N]`` prefix and to ``<log_dir>/rank-N.log`` (``tee.Output``); the last
stderr lines are kept for the root-cause report.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Mapping, Optional, Protocol, Sequence

from runtime.agent import contract
from runtime.agent.execution import console
from runtime.agent.execution.starter import EXEC_FLAG, starter
from runtime.agent.execution.tee import Output
from runtime.agent.spec import streams
from runtime.agent.spec.job import SETTINGS
from runtime.agent.spec.signals import exit_status
from runtime.agent.world import ended_text

RUNTIME_ROOT = str(Path(__file__).resolve().parents[3])
"""The directory holding the ``runtime`` package: the bootstrap appends it to the user processes'
``sys.path`` (never to their PYTHONPATH: locally it is the repository, whose ``tests`` or
``examples`` must not shadow installed packages)."""


@dataclass(frozen=True)
class ProcExit:
    """A user process ended.

    Attributes:
        generation: the world generation it belonged to.
        local_rank: its index on this node.
        rank: its global rank.
        exit_code: its exit status; 128 + N when killed by signal N.
        stderr_tail: its last stderr lines, oldest first.
        timestamp: wall-clock time of the exit, seconds since the epoch.
        requested: the agent had asked it to stop (teardown), so this is not a failure.
        signal: the number of the signal that killed it; 0 when it exited (``exit_code`` is then
            its own, even 137: ``sys.exit(137)`` is no SIGKILL).
    """

    generation: int
    local_rank: int
    rank: int
    exit_code: int
    stderr_tail: tuple[str, ...]
    timestamp: float
    requested: bool
    signal: int = 0

    @property
    def how(self) -> str:
        """How it ended: ``exited with code 1``, or ``was killed by SIGKILL``."""
        return ended_text(self.exit_code, self.signal)


def inherited_env(agent_env: Mapping[str, str]) -> dict[str, str]:
    """The part of the agent's environment its user processes and framework daemons inherit (a
    rank's contract goes on top).

    Args:
        agent_env: the agent's own environment, name to value.

    Returns:
        ``agent_env`` without the agent-only names (``contract.AGENT_ONLY_PREFIXES``): the job token,
        the agent's other settings, and the training operator's ``PET_*`` torchrun arguments; nor
        the settings it reads under torchrun's names (``MASTER_PORT``, ``TORCHELASTIC_SIGNALS_TO_HANDLE``:
        a rank gets its own values of them, a Ray or Monarch daemon and the tasks it runs none,
        as under torchrun).
    """
    return {k: v for k, v in agent_env.items()
            if not k.startswith(contract.AGENT_ONLY_PREFIXES) and k not in _SETTINGS_UNPREFIXED}


_SETTINGS_UNPREFIXED = frozenset(d.env for d in SETTINGS.values() if not d.env.startswith(contract.AGENT_ONLY_PREFIXES))
"""The job settings an agent reads from variables of torchrun's names."""


def rank_dir(log_dir: Path, local_rank: int) -> Path:
    """The directory of one local rank's own files in a generation's log directory, as torchrun
    lays out ``attempt_N/<local rank>/``: ``stdout.log``, ``stderr.log`` (when redirected or teed)
    and ``error.json`` (its ``TORCHELASTIC_ERROR_FILE``)."""
    return log_dir / str(local_rank)


class Supervisor(Protocol):
    """What the agent does with one generation's processes (``LocalProcesses``, ``pool.WorkerPool``,
    or a benchmark's stand-in): the process-spawner seam."""

    generation: int

    def start(self) -> None:
        """Start every process."""

    def stop(self, grace: float, sig: int = signal.SIGTERM) -> None:
        """Stop every process: ``sig`` (default SIGTERM), then SIGKILL after ``grace`` seconds."""

    def send(self, local_rank: int, sig: int) -> bool:
        """Signal one process; whether it was still running."""

    def renumber(self, first_rank: int) -> None:
        """A membership change moved this node's processes: local rank 0 is now global rank
        ``first_rank``. Output prefixes and exit reports use the new ranks from now on."""

    def activity(self) -> list[tuple[int, Optional[int], float]]:
        """``(global rank, exit code or None while it runs, seconds since it last wrote)`` per rank that the
        straggler report and the closed-rendezvous rule read; empty where neither applies."""


Spawner = Callable[..., Supervisor]
"""Builds a :class:`Supervisor` with :class:`LocalProcesses`' constructor arguments, by keyword."""


class LocalProcesses:
    """The ``num_proc`` user processes of one node for one generation.

    Args:
        generation: world generation these processes belong to.
        first_rank: global rank of local rank 0.
        envs: one full environment per local rank (the contract merged over :func:`inherited_env`).
        entrypoint: the user command after the interpreter (``script.py args`` or ``-m module args``),
            or with ``no_python`` a whole argv run as is.
        on_exit: called from a watcher thread when a process ends.
        log_dir: directory for ``rank-N.log`` files, or ``None``.
        out: binary stream for prefixed stdout lines (with ``err``, a console of their own;
            neither: the agent's, ``console.default()``).
        err: binary stream for prefixed stderr lines.
        python: the interpreter to run.
        pass_fds: file descriptors every process inherits (service mode: its channel to the agent).
        no_python: ``entrypoint`` is an executable and its arguments: the bootstrap sets the process
            up, then replaces itself with it (same pid), instead of running Python code.
        label: what a process is called in its output prefix (``[rank 3]``) and log file name
            (``rank-3.log``), before its number (``first_rank + local_rank``); a framework daemon
            goes by its name and node rank (``[ray worker 1]``, ``ray-worker-1.log``).
        outputs: where each local rank's stdout and stderr go besides ``rank-N.log`` (torchrun's
            ``--redirects``, ``--tee``, ``--local-ranks-filter``; files in :func:`rank_dir`).
        stdin_local_rank: the local rank that inherits this agent's stdin (local mode: the one of
            global rank 0); every other process reads EOF from ``/dev/null``.
        tap: receives a copy of each process's output, with its local rank: ``tap(local_rank,
            stream, data)`` (stream 0 stdout, 1 stderr), in order per stream, from the copying threads.
    """

    def __init__(
        self,
        *,
        generation: int,
        first_rank: int,
        envs: Sequence[Mapping[str, str]],
        entrypoint: Sequence[str],
        on_exit: Callable[[ProcExit], None],
        log_dir: Optional[str] = None,
        out: Optional[BinaryIO] = None,
        err: Optional[BinaryIO] = None,
        python: str = sys.executable,
        pass_fds: Sequence[int] = (),
        no_python: bool = False,
        label: str = "rank",
        outputs: Optional[streams.Streams] = None,
        stdin_local_rank: Optional[int] = None,
        tap: Optional[Callable[[int, int, bytes], None]] = None,
    ) -> None:
        self.generation = generation
        self._tap = tap
        self._streams = outputs or streams.Streams()
        self._filtered: tuple[Optional[BinaryIO], ...] = (None, None)
        self._stdin_local_rank = stdin_local_rank
        self._label = label
        self._first_rank = first_rank
        self._envs = envs
        exec_flag = (EXEC_FLAG,) if no_python else ()
        self._argv = [python, "-u", "-c", starter(RUNTIME_ROOT), *exec_flag, *entrypoint]
        self._pass_fds = tuple(pass_fds)
        self._on_exit = on_exit
        self._log_dir = Path(log_dir) if log_dir else None
        self._console = (console.default() if out is None and err is None
                         else console.Console(out or sys.stdout.buffer, err or sys.stderr.buffer))
        self._lock = threading.Lock()
        self._procs: list[subprocess.Popen[bytes]] = []
        self._outputs: list[Output] = []
        self._stopping = threading.Event()
        self._watchers: list[threading.Thread] = []
        self.torn_down: tuple[str, ...] = ()
        """After :meth:`stop`: each process it found running and how it ended, ``rank 2 was killed by
        SIGTERM`` (torchrun's agents log their workers' ``-15`` likewise)."""

    @property
    def pids(self) -> list[int]:
        """Process ids, by local rank."""
        return [p.pid for p in self._procs]

    def start(self) -> None:
        """Start every process. Must be called from the agent's main thread (parent-death signal).

        Raises:
            OSError: a process could not be started (the ones already started keep running;
                call :meth:`stop`).
        """
        if self._log_dir:
            self._log_dir.mkdir(parents=True, exist_ok=True)
        self._filtered = tuple(
            open(self._log_dir / name, "ab") if self._log_dir and filters else None  # noqa: SIM115 - closed in stop()
            for name, filters in (("filtered_stdout.log", self._streams.stdout_filters),
                                  ("filtered_stderr.log", self._streams.stderr_filters))
        )
        for local_rank, env in enumerate(self._envs):
            rank = self._first_rank + local_rank
            proc = subprocess.Popen(
                self._argv,
                env={**env, contract.PARENT_PID: str(os.getpid())},
                stdin=None if local_rank == self._stdin_local_rank else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                pass_fds=self._pass_fds,
            )
            self._procs.append(proc)
            name = f"{self._label} {rank}"
            log_path = self._log_dir / f"{name.replace(' ', '-')}.log" if self._log_dir else None
            plans = (self._streams.plan(local_rank, streams.OUT), self._streams.plan(local_rank, streams.ERR))
            stream_dir = rank_dir(self._log_dir, local_rank) if self._log_dir and any(p.file for p in plans) else None
            if stream_dir is not None:
                stream_dir.mkdir(parents=True, exist_ok=True)
            output = Output(prefix=name, log_path=log_path, console=self._console, lock=self._lock, plans=plans,
                            stream_dir=stream_dir,
                            filters=(self._streams.stdout_filters, self._streams.stderr_filters),
                            filtered=self._filtered,  # type: ignore[arg-type]
                            tap=None if self._tap is None else functools.partial(self._tap, local_rank))
            self._outputs.append(output)
            output.pump(proc.stdout, proc.stderr)  # type: ignore[arg-type]
            watcher = threading.Thread(target=self._watch, args=(local_rank, proc, output), daemon=True)
            watcher.start()
            self._watchers.append(watcher)

    def _watch(self, local_rank: int, proc: subprocess.Popen[bytes], output: Output) -> None:
        code = proc.wait()
        stamp = time.time()
        output.close(timeout=2.0)
        self._on_exit(
            ProcExit(
                generation=self.generation,
                local_rank=local_rank,
                rank=self._first_rank + local_rank,
                exit_code=exit_status(code),
                stderr_tail=tuple(output.tail),
                timestamp=stamp,
                requested=self._stopping.is_set(),
                signal=max(0, -code),
            )
        )

    def drain(self, local_rank: int) -> None:
        """Pass on at once what process ``local_rank`` has written so far (to every sink and the tap)."""
        self._outputs[local_rank].drain()

    def running(self) -> bool:
        """Whether any process is still running."""
        return any(p.poll() is None for p in self._procs)

    def activity(self) -> list[tuple[int, Optional[int], float]]:
        """``(global rank, exit code or None while it runs, seconds since it last wrote)`` per process."""
        now = time.time()
        return [(self._first_rank + i, None if p.poll() is None else exit_status(p.returncode), now - o.last_output)
                for i, (p, o) in enumerate(zip(self._procs, self._outputs))]

    def send(self, local_rank: int, sig: int) -> bool:
        """Send ``sig`` to one process (not its group) if it is still running; whether it was sent."""
        proc = self._procs[local_rank]
        if proc.poll() is not None:
            return False
        try:
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            return False
        return True

    def renumber(self, first_rank: int) -> None:
        """Local rank 0 is now global rank ``first_rank``: prefixes and exit reports follow (log files
        keep the names they were opened with)."""
        with self._lock:
            self._first_rank = first_rank
            for local_rank, output in enumerate(self._outputs):
                output.rename(f"{self._label} {first_rank + local_rank}")

    def stop(self, grace: float, sig: int = signal.SIGTERM) -> None:
        """Send ``sig`` (SIGTERM, or the stop signal the agent received, as torchrun passes it on)
        to every process group, SIGKILL what is left after ``grace`` seconds, reap all.

        Safe to call more than once. Whole groups are signalled, so children the user's processes
        started (data loader workers and the like) go too.
        """
        first_stop = not self._stopping.is_set()
        self._stopping.set()
        running = [i for i, p in enumerate(self._procs) if p.poll() is None]
        self._signal_groups(sig)
        deadline = time.monotonic() + grace
        for proc in self._procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                break
        self._signal_groups(signal.SIGKILL)
        for proc in self._procs:
            proc.wait()
        if first_stop:
            self.torn_down = tuple(
                f"{self._label} {self._first_rank + i} "
                f"{ended_text(exit_status(self._procs[i].returncode), max(0, -self._procs[i].returncode))}"
                for i in running)
        for watcher in self._watchers:
            watcher.join(timeout=3.0)
        with self._lock:
            for file in self._filtered:
                if file is not None:
                    file.close()

    def _signal_groups(self, sig: int) -> None:
        for proc in self._procs:
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                continue
