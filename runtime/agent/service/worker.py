"""The service-mode worker process: runs calls from its agent, one at a time, in the main thread.

The agent starts ``num_proc`` of these per node as
``python -u -m runtime.agent.execution.bootstrap -m runtime.agent.service.worker``, with the environment contract and
``TRAINPLANE_SERVICE_FD`` naming this process's end of a socketpair. The process lives as long as
the generation, so whatever the called functions keep (module globals, an initialised process group,
a model) survives from one call to the next. Standard library only.

Frames on the channel (``runtime.agent.service.channel``)::

    worker -> agent   {"hello": <pid>}                                     ready for calls
    agent -> worker   {"call": <call_id>, "invocation": {...}, "code": <dir>}  run it (calls.Invocation),
                                                                         importing from that synced tree
    agent -> worker   {"cancel": <call_id>}                                stop it, or skip it if not started
    worker -> agent   {"reply": <call_id>, "ok": true, "value": <packed result>}
                      {"reply": <call_id>, "ok": false, "error": <wire error body>}

Cancellation: a reader thread takes frames off the channel. A cancel for the running call sends
``CANCEL_SIGNAL`` to the main thread (``pthread_kill``, which also wakes blocking system calls such as
``time.sleep``); the handler raises :class:`~runtime.agent.errors.CallInterrupt` only while the user's
function is on the stack, never in this loop's own bookkeeping. Code blocked in C that does not
return to the interpreter (a collective waiting for a peer that died) is not interrupted: the agent
replaces the process once its grace period is over.
"""

from __future__ import annotations

import collections
import os
import pickle
import queue
import signal
import socket
import sys
import threading
from types import FrameType
from typing import Any, Callable, Mapping, Optional

from runtime.agent import contract
from runtime.agent.code.imports import TreeImports
from runtime.agent.errors import (
    CallCancelled,
    CallInterrupt,
    ChannelClosed,
    RemoteError,
    TrainplaneError,
    WorkerMembershipChanged,
)
from runtime.agent.execution import delivery, torchgroup, torchhooks
from runtime.agent.service.calls import STR_FAILED, Invocation, remote_error
from runtime.agent.service.channel import Channel
from runtime.agent.spec.wire import PICKLE, error_body, json_problem, pack_result

CANCEL_SIGNAL = signal.SIGINT
"""Signal the reader thread sends the main thread to interrupt a cancelled call."""
_REMEMBERED_CANCELS = 64
"""Cancels for calls not (yet) running that are remembered, newest kept."""


class ServiceWorker:
    """One worker process's call loop.

    Args:
        channel: the channel to this node's agent.
        rank: this process's global rank (for error reports).
        node_rank: its node's rank.
    """

    def __init__(self, channel: Channel, rank: int, node_rank: int) -> None:
        self._channel = channel
        self._rank = rank
        self._node_rank = node_rank
        self._inbox: queue.SimpleQueue[Optional[Mapping[str, Any]]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._current: Optional[str] = None
        self._interrupt: Optional[str] = None
        self._interruptible = False
        self._early_cancels: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._main = threading.get_ident()
        self._imports = TreeImports()

    def serve(self) -> int:
        """Announce readiness and run calls until the agent closes the channel; returns 0.

        Must run in the main thread (it installs the cancellation signal handler).
        """
        signal.signal(CANCEL_SIGNAL, self._on_signal)
        threading.Thread(target=self._read, name="service-reader", daemon=True).start()
        try:
            self._channel.send({"hello": os.getpid()})
            while True:
                message = self._inbox.get()
                if message is None:
                    return 0
                reply = self._run(message)
                sys.stdout.flush()  # what the call wrote reaches the agent before its answer
                sys.stderr.flush()
                self._reply(reply)
        except ChannelClosed:
            return 0

    # --- reader thread ---------------------------------------------------------------------------

    def _read(self) -> None:
        while True:
            try:
                message = self._channel.recv()
            except ChannelClosed:
                self._inbox.put(None)
                with self._lock:
                    if self._current is not None:
                        self._interrupt_main(self._current)
                return
            if message is None:
                continue
            if "call" in message:
                self._inbox.put(message)
            elif "cancel" in message:
                self._cancel(str(message["cancel"]))

    def _cancel(self, call_id: str) -> None:
        with self._lock:
            if self._current == call_id:
                self._interrupt_main(call_id)
                return
            self._early_cancels[call_id] = None
            while len(self._early_cancels) > _REMEMBERED_CANCELS:
                self._early_cancels.popitem(last=False)

    def _interrupt_main(self, call_id: str) -> None:
        if self._interrupt != call_id:
            self._interrupt = call_id
            signal.pthread_kill(self._main, CANCEL_SIGNAL)

    # --- main thread -----------------------------------------------------------------------------

    def _on_signal(self, _signum: int, _frame: Optional[FrameType]) -> None:
        if self._interruptible and self._interrupt is not None and self._interrupt == self._current:
            self._interruptible = False
            raise CallInterrupt(f"call {self._interrupt} cancelled")

    def _run(self, message: Mapping[str, Any]) -> dict[str, Any]:
        call_id = str(message["call"])
        with self._lock:
            if call_id in self._early_cancels:
                del self._early_cancels[call_id]
                return self._error(call_id, CallCancelled(f"rank {self._rank}: cancelled before it started"))
            self._current = call_id
        fn_name = str(message.get("invocation", {}).get("fn", "?"))
        tree = str(message.get("code") or "")
        try:
            delivery.poll()  # a change since the last call: this call sees the new world's env
            if tree:
                self._imports.use(tree)  # new code: its changed modules are imported again
            invocation = Invocation.from_json(message["invocation"], allow_pickle=True)
            torchgroup.before_call()  # env:// on a kept store; no call on a group of an older world
            fn = invocation.resolve()
            args, kwargs = invocation.arguments()
            value = self._call_user(fn, args, kwargs)
            return self._result(call_id, fn_name, value, invocation.serialization)
        except CallInterrupt:
            return self._error(call_id, CallCancelled(f"rank {self._rank}: interrupted"))
        except WorkerMembershipChanged as exc:
            return self._error(call_id, exc)
        except BaseException as exc:  # whatever the user's code raised (SystemExit too): the process stays
            return self._error(call_id, remote_error(exc, self._rank, self._node_rank, fn_name, tree))
        finally:
            with self._lock:
                self._current = None
                self._interrupt = None

    def _call_user(self, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        try:
            self._interruptible = True
            if self._interrupt is not None and self._interrupt == self._current:
                raise CallInterrupt("cancelled while starting")
            return fn(*args, **kwargs)
        finally:
            self._interruptible = False

    def _result(self, call_id: str, fn_name: str, value: Any, serialization: str) -> dict[str, Any]:
        """The reply carrying ``value``; a value that cannot travel as it is becomes a RemoteError saying why."""
        if serialization == PICKLE:
            try:
                return {"reply": call_id, "ok": True, "value": pack_result(value, serialization)}
            except Exception as exc:  # pickling runs the value's own code (__reduce__), which may raise anything
                return self._unsendable(call_id, fn_name, f"the result cannot be pickled: {type(exc).__name__}: "
                                                          f"{_safe_str(exc)}")
        problem = json_problem(value, "the result")
        if problem is None:
            return {"reply": call_id, "ok": True, "value": value}
        if _pickles(value):  # never for a generator, which pickle cannot send either
            problem += "; or deploy with serialization='pickle' (the job must allow it)"
        return self._unsendable(call_id, fn_name, problem)

    def _unsendable(self, call_id: str, fn_name: str, why: str) -> dict[str, Any]:
        return self._error(call_id, RemoteError(self._rank, self._node_rank, "TypeError",
                                                f"{fn_name} returned a value that cannot be sent back: {why}",
                                                fn=fn_name))

    def _error(self, call_id: str, exc: TrainplaneError) -> dict[str, Any]:
        return {"reply": call_id, "ok": False, "error": error_body(exc)}

    def _reply(self, reply: dict[str, Any]) -> None:
        try:
            self._channel.send(reply)
        except ChannelClosed:
            raise
        except Exception as exc:  # e.g. a structure too deep to encode (RecursionError), a cycle (ValueError)
            self._channel.send(self._error(reply["reply"], RemoteError(
                self._rank, self._node_rank, "TypeError",
                f"the result cannot be sent back: {type(exc).__name__}: {_safe_str(exc)}")))


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:
        return STR_FAILED


def _pickles(value: Any) -> bool:
    """Whether pickle could carry ``value`` (so suggesting it helps)."""
    try:
        pickle.dumps(value)
    except Exception:
        return False
    return True


def main() -> int:
    """Entry point under the bootstrap: serve the channel named by ``TRAINPLANE_SERVICE_FD``."""
    fd_text = os.environ.get(contract.SERVICE_FD)
    if not fd_text:
        print(f"{contract.SERVICE_MODULE}: {contract.SERVICE_FD} is not set; the agent starts this module",
              file=sys.stderr)
        return contract.EXIT_USAGE
    torchhooks.install_on_import()  # every env:// rendezvous of this process on a kept store
    sock = socket.socket(fileno=int(fd_text))
    sock.set_inheritable(False)
    worker = ServiceWorker(Channel(sock), int(os.environ.get(contract.RANK, "0")),
                           int(os.environ.get(contract.NODE_RANK, "0")))
    return worker.serve()


if __name__ == "__main__":
    sys.exit(main())
