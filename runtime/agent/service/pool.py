"""A node's long-lived service worker processes (service mode), as its agent runs them.

Each local rank is a *slot*: one process running ``runtime.agent.service.worker`` under the bootstrap, the
agent's end of the socketpair the process talks over (``channel.py``), and one thread that owns both.
The thread spawns the process - so the Linux parent-death signal, which follows the spawning
*thread*, lasts as long as the pool - feeds it calls one at a time, and replaces it when it dies or
when a cancelled call has not stopped within the grace period. Standard library only.
"""

from __future__ import annotations

import codecs
import queue
import signal
import socket
import sys
import threading
import time
from typing import Callable, Mapping, Optional, Sequence

from runtime.agent import contract
from runtime.agent.errors import CallCancelled, ChannelClosed, RemoteError, TrainplaneError
from runtime.agent.execution.procs import LocalProcesses, ProcExit
from runtime.agent.service.channel import Channel
from runtime.agent.service.executor import LocalCall, RankDone, RankEvent, RankFailed
from runtime.agent.spec.wire import error_from_body

POLL = 0.05
"""Seconds between checks of a running call's cancellation and of its process, while waiting."""
EXIT_REPORT_WAIT = 2.0
"""Seconds to wait for a dead process's exit status (and stderr tail) before reporting without it."""
HELLO_TIMEOUT = 120.0
"""Seconds a new worker process may take to say hello (it does so before importing any user code)."""
STREAMS = ("stdout", "stderr")
"""A call's output streams by the index the process supervisor gives them."""


class _Control:
    """One call's state shared by the slots running it."""

    def __init__(self, call: LocalCall, slots: int) -> None:
        self.call = call
        self.cancelled_at: Optional[float] = None
        self.remaining = slots


class WorkerPool:
    """The ``num_proc`` service worker processes of one node for one generation.

    Args:
        generation: world generation the processes belong to.
        node_rank: this node's rank (for error reports).
        first_rank: global rank of local rank 0.
        envs: one full environment per local rank (the contract merged over ``procs.inherited_env``).
        say: writes one line to the agent's log.
        grace: seconds a cancelled call gets to unwind before its process is replaced; also the
            SIGTERM-to-SIGKILL grace at :meth:`stop`.
        log_dir: directory for ``rank-N.log`` files, or ``None``.
        python: the interpreter to run.
        clock: monotonic clock, seconds.
    """

    def __init__(
        self,
        *,
        generation: int,
        node_rank: int,
        first_rank: int,
        envs: Sequence[Mapping[str, str]],
        say: Callable[[str], None],
        grace: float,
        log_dir: Optional[str] = None,
        python: str = sys.executable,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.generation = generation
        self.node_rank = node_rank
        self.ranks = tuple(first_rank + i for i in range(len(envs)))
        self.say = say
        self.grace = grace
        self.log_dir = log_dir
        self.python = python
        self.clock = clock
        self._lock = threading.Lock()
        self._calls: dict[str, _Control] = {}
        self._slots = [_Slot(self, rank, env) for rank, env in zip(self.ranks, envs)]

    def start(self) -> None:
        """Start every slot's thread, which starts its process; returns at once."""
        for slot in self._slots:
            slot.start()

    @property
    def ready(self) -> int:
        """How many processes have said hello and are alive."""
        return sum(slot.ready for slot in self._slots)

    @property
    def pids(self) -> list[Optional[int]]:
        """Process id per local rank (``None`` while a slot has no process)."""
        return [slot.pid for slot in self._slots]

    def send(self, local_rank: int, sig: int) -> bool:
        """Signals are not how service workers learn of a change: the agent fails the calls in flight,
        and each worker applies the new world before its next call. Always ``False``."""
        return False

    def activity(self) -> list[tuple[int, Optional[int], float]]:
        """None: a service worker's silence is its calls', reported per call (``silence``)."""
        return []

    def renumber(self, first_rank: int) -> None:
        """Local rank 0 is now global rank ``first_rank``: results, errors and output prefixes carry
        the new ranks from the next call on (each process applies the new world before it)."""
        self.ranks = tuple(first_rank + i for i in range(len(self._slots)))
        for slot, rank in zip(self._slots, self.ranks):
            slot.renumber(rank)

    def submit(self, call: LocalCall) -> None:
        """Queue ``call`` on every slot; each posts one event when its process answers."""
        control = _Control(call, len(self._slots))
        with self._lock:
            self._calls[call.call_id] = control
        for slot in self._slots:
            slot.queue.put(control)

    def cancel(self, call_id: str) -> None:
        """Stop ``call_id``: skip it where it has not started, interrupt it where it runs."""
        with self._lock:
            control = self._calls.get(call_id)
            if control is None or control.cancelled_at is not None:
                return
            control.cancelled_at = self.clock()
        for slot in self._slots:
            slot.cancel(control)

    def stop(self, grace: float, sig: int = signal.SIGTERM) -> None:
        """Stop every process (``sig``, default SIGTERM; SIGKILL after ``grace`` seconds) and every slot thread."""
        threads = [threading.Thread(target=slot.stop, args=(grace, sig), daemon=True) for slot in self._slots]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _done(self, control: _Control) -> None:
        with self._lock:
            control.remaining -= 1
            if control.remaining == 0:
                self._calls.pop(control.call.call_id, None)


class _Slot:
    """One local rank: its process, its channel and the thread that owns them."""

    def __init__(self, pool: WorkerPool, rank: int, env: Mapping[str, str]) -> None:
        self._pool = pool
        self.rank = rank
        self._env = dict(env)
        self.queue: queue.SimpleQueue[Optional[_Control]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._proc: Optional[LocalProcesses] = None
        self._channel: Optional[Channel] = None
        self._running: Optional[_Control] = None
        self._incarnation = 0
        self._exit: Optional[ProcExit] = None
        self._exited = threading.Event()
        self._stopping = False
        self._broken = ""
        self.ready = False
        self._decoders = [codecs.getincrementaldecoder("utf-8")(errors="replace") for _ in STREAMS]
        self._thread = threading.Thread(target=self._serve, name=f"service-rank-{rank}", daemon=True)

    def renumber(self, rank: int) -> None:
        """This slot's process now holds global rank ``rank``."""
        self.rank = rank
        proc = self._proc
        if proc is not None:
            proc.renumber(rank)

    @property
    def pid(self) -> Optional[int]:
        """The current process's id, or ``None``."""
        proc = self._proc
        return proc.pids[0] if proc is not None and proc.pids else None

    def start(self) -> None:
        self._thread.start()

    def cancel(self, control: _Control) -> None:
        with self._lock:
            channel = self._channel if self._running is control else None
        if channel is not None:
            self._send_cancel(channel, control)

    def stop(self, grace: float, sig: int = signal.SIGTERM) -> None:
        with self._lock:
            self._stopping = True
            proc, channel = self._proc, self._channel
        if proc is not None:
            proc.stop(grace, sig)
        if channel is not None:
            channel.close()
        self.queue.put(None)
        self._thread.join(timeout=grace + 5.0)

    # --- the slot's thread -----------------------------------------------------------------------

    def _serve(self) -> None:
        self._spawn()
        while True:
            control = self.queue.get()
            if control is None:
                return
            try:
                self._run(control)
            finally:
                self._pool._done(control)

    def _run(self, control: _Control) -> None:
        call = control.call
        if control.cancelled_at is not None:
            return
        channel = self._channel if self.ready else self._spawn()
        if control.cancelled_at is not None:
            return
        if channel is None:
            call.post(RankFailed(self.rank, self._unavailable()))
            return
        with self._lock:
            self._running = control
        try:
            channel.send({"call": call.call_id, "invocation": call.invocation.to_json(),
                          **({"code": call.code} if call.code else {})})
            if control.cancelled_at is not None:
                self._send_cancel(channel, control)
            self._await_reply(channel, control)
        except ChannelClosed:
            self._on_death(call)
        finally:
            with self._lock:
                self._running = None

    def _await_reply(self, channel: Channel, control: _Control) -> None:
        call = control.call
        while True:
            message = channel.recv(timeout=POLL)
            if message is not None and message.get("reply") == call.call_id:
                proc = self._proc
                if proc is not None and call.output is not None:
                    proc.drain(0)  # what the process wrote before answering belongs to this call
                call.post(self._event(message))
                return
            if self._exited.is_set():
                raise ChannelClosed("process exited")
            if self._stopping:
                call.post(RankFailed(self.rank, CallCancelled(f"rank {self.rank}: the node is stopping")))
                return
            cancelled_at = control.cancelled_at
            if cancelled_at is not None and self._pool.clock() - cancelled_at > self._pool.grace:
                self._pool.say(f"rank {self.rank} did not stop within {self._pool.grace:g} s of cancelling call "
                               f"{call.call_id}; replacing its process (its state is lost)")
                self._spawn()
                return

    def _on_death(self, call: LocalCall) -> None:
        self._exited.wait(EXIT_REPORT_WAIT)
        if self._stopping:
            return
        how = self._exit.how if self._exit else "exited with code unknown"
        tail = "\n".join(self._exit.stderr_tail) if self._exit else ""
        call.post(RankFailed(self.rank, RemoteError(
            self.rank, self._pool.node_rank, "ProcessExited",
            f"the worker process {how} during the call", tail, call.invocation.fn,
        )))
        self._pool.say(f"rank {self.rank}: worker process {how} during a call; starting a new one")
        self._spawn()

    def _event(self, message: Mapping[str, object]) -> RankEvent:
        if message.get("ok"):
            return RankDone(self.rank, message.get("value"))
        body = message.get("error")
        error = error_from_body(body) if isinstance(body, Mapping) else None
        if error is None:
            error = RemoteError(self.rank, self._pool.node_rank, "ProtocolError", f"malformed reply {message!r}")
        return RankFailed(self.rank, error)

    def _send_cancel(self, channel: Channel, control: _Control) -> None:
        try:
            channel.send({"cancel": control.call.call_id})
        except ChannelClosed:
            return

    def _unavailable(self) -> TrainplaneError:
        if self._stopping:
            return CallCancelled(f"rank {self.rank}: the node is stopping")
        return RemoteError(self.rank, self._pool.node_rank, "WorkerUnavailable",
                           f"the worker process could not start: {self._broken}")

    # --- process lifecycle (the slot's thread only) --------------------------------------------

    def _spawn(self) -> Optional[Channel]:
        """Retire the current process, start a new one and wait for its hello.

        Returns:
            The new process's channel, or ``None`` (``_broken`` says why) when it did not become ready.
        """
        self._retire()
        pool = self._pool
        with self._lock:
            if self._stopping:
                return None
            parent, child = socket.socketpair()
            self._incarnation += 1
            incarnation = self._incarnation
            self._exit = None
            self._exited.clear()
            proc = LocalProcesses(
                generation=pool.generation, first_rank=self.rank,
                envs=[{**self._env, contract.SERVICE_FD: str(child.fileno())}],
                entrypoint=("-m", contract.SERVICE_MODULE), on_exit=lambda event: self._on_exit(incarnation, event),
                log_dir=pool.log_dir, python=pool.python, pass_fds=(child.fileno(),),
                tap=lambda _local_rank, stream, data: self._on_output(incarnation, stream, data),
            )
            try:
                proc.start()
            except OSError as exc:
                parent.close()
                self._broken = f"cannot start {pool.python}: {exc}"
                return None
            finally:
                child.close()
            self._proc, self._channel = proc, Channel(parent)
        return self._await_hello(self._channel)

    def _await_hello(self, channel: Channel) -> Optional[Channel]:
        deadline = self._pool.clock() + HELLO_TIMEOUT
        while not self._stopping:
            try:
                message = channel.recv(timeout=POLL)
            except ChannelClosed:
                break
            if message is not None and "hello" in message:
                self.ready, self._broken = True, ""
                return channel
            if self._exited.is_set():
                break
            if self._pool.clock() > deadline:
                self._retire()
                self._broken = f"it did not say hello within {HELLO_TIMEOUT:g} s and was stopped"
                self._pool.say(f"rank {self.rank}: {self._broken}")
                return None
        self._exited.wait(EXIT_REPORT_WAIT)
        exit_info = self._exit
        tail = "; ".join(exit_info.stderr_tail[-5:]) if exit_info else ""
        how = exit_info.how if exit_info else "exited with code unknown"
        self._broken = f"it {how} before it was ready" + (f" (stderr: {tail})" if tail else "")
        if not self._stopping:
            self._pool.say(f"rank {self.rank}: {self._broken}")
        return None

    def _retire(self) -> None:
        with self._lock:
            proc, channel = self._proc, self._channel
            self._proc, self._channel, self.ready = None, None, False
        if proc is not None:
            proc.stop(0.0)
        if channel is not None:
            channel.close()

    def _on_output(self, incarnation: int, stream: int, data: bytes) -> None:
        """A copy of the process's output (its copying thread): to the running call, if it wants it."""
        with self._lock:
            control = self._running if incarnation == self._incarnation else None
        if control is None or control.call.output is None:
            return
        text = self._decoders[stream].decode(data)
        if text:
            control.call.output(self.rank, STREAMS[stream], text)

    def _on_exit(self, incarnation: int, event: ProcExit) -> None:
        if incarnation != self._incarnation:
            return
        self._exit = event
        self.ready = False
        self._exited.set()
        if not event.requested and not self._stopping and self._running is None:
            self._pool.say(f"rank {self.rank}: worker process {event.how} while idle; "
                           f"a new one starts with the next call")
