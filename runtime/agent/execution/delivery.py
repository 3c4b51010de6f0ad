"""Membership changes delivered into a user process: raised as an exception, or polled at safe points.

This is ``runtime.membership`` for users (``poll()``, ``wait()``). The agent (:func:`write`) writes
the new world for each of its processes to the file named by
``TRAINPLANE_WORLD_FILE`` and sends the process :data:`DELIVERY_SIGNAL`. The handler installed by
``runtime.agent.execution.bootstrap`` (:func:`install`) updates ``os.environ`` to the new world (WORLD_SIZE,
RANK, MASTER_ADDR, POD_IPS, ...) and raises :class:`WorkerMembershipChanged` in the main thread.
Code that prefers safe points calls :func:`poll` instead (and may run with ``monitor_members`` off).

Delivery is armed once the user's code can handle a change: when it first imports ``runtime`` (``import
runtime``, ``from runtime import WorkerMembershipChanged``, ...: :func:`arm_on_import`), or first
calls :func:`poll`, :func:`wait` or :func:`generation`. Until then a change is not raised (it would
be raised wherever the process happens to be, ``import torch`` say, before any handler exists): the
world file keeps it, and arming applies it to ``os.environ`` silently, so the process starts its
work in the newest world. Import ``runtime`` before building a process group. Standard library only.
"""

from __future__ import annotations

import builtins
import json
import os
import signal
import time
from typing import Any, Mapping, Optional

from runtime.agent import contract
from runtime.agent.errors import WorkerMembershipChanged

DELIVERY_SIGNAL: int = (signal.SIGRTMIN + 4 if hasattr(signal, "SIGRTMIN")
                        else getattr(signal, "SIGINFO", signal.SIGWINCH))
"""The signal the agent sends a user process when its world changed: a real-time signal on Linux
(SIGRTMIN + 4), SIGINFO (BSD, macOS) elsewhere; never SIGUSR1 or SIGUSR2, which schedulers send as a
preemption notice and the launcher forwards to the ranks (torchrun's ``--signals-to-handle``)."""


def write(path: str, change: WorkerMembershipChanged, env: Mapping[str, str]) -> None:
    """The agent's side: write the world file a process reads (``TRAINPLANE_WORLD_FILE``), at once (a
    reader never sees half of it): the change and the process's environment in the new world.

    Raises:
        OSError: the file cannot be written.
    """
    state = {
        "generation": change.generation,
        "env": dict(env),
        "added_ips": list(change.added_ips),
        "removed_ips": list(change.removed_ips),
        "previous_ips": list(change.previous_ips),
        "current_ips": list(change.current_ips),
    }
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(json.dumps(state))  # one write; json.dump's many small ones cost 5x at 1,000 nodes
    os.replace(tmp, path)


def _read() -> Optional[dict[str, Any]]:
    path = os.environ.get(contract.TRAINPLANE_WORLD_FILE)
    if not path:
        return None
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


class _Gate:
    """Module state: callers of :func:`wait` in progress, the last change applied, and whether
    delivery is armed."""

    deferring = 0
    last: Optional[WorkerMembershipChanged] = None
    armed = False


def generation() -> int:
    """The world generation this process's ``os.environ`` describes (arms delivery, see the module)."""
    arm()
    return int(os.environ.get(contract.TRAINPLANE_GENERATION, "0"))


def arm() -> None:
    """Arm delivery (once): from now on a change is raised in the main thread; one that came before
    is applied to ``os.environ`` now, silently."""
    if not _Gate.armed:
        _Gate.armed = True
        catch_up()


def catch_up() -> None:
    """Apply a pending change to ``os.environ`` without raising it (the bootstrap, before user code)."""
    _apply()


def poll() -> Optional[WorkerMembershipChanged]:
    """Apply a pending membership change, if any, and return it (``None`` when there is none).

    On a change, ``os.environ`` is updated to the new world before this returns. Safe to call as
    often as you like: a change is returned once. Arms delivery (see the module).
    """
    _Gate.armed = True
    return _apply()


def _apply() -> Optional[WorkerMembershipChanged]:
    state = _read()
    current = int(os.environ.get(contract.TRAINPLANE_GENERATION, "0"))
    if state is None or int(state["generation"]) <= current:
        return None
    os.environ.update(state["env"])
    _Gate.last = WorkerMembershipChanged(
        state["added_ips"], state["removed_ips"], state["previous_ips"], state["current_ips"], int(state["generation"])
    )
    return _fresh(_Gate.last)


def last() -> Optional[WorkerMembershipChanged]:
    """The newest membership change applied in this process (raised, polled or caught up), or ``None``."""
    return None if _Gate.last is None else _fresh(_Gate.last)


def _fresh(change: WorkerMembershipChanged) -> WorkerMembershipChanged:
    """A copy without a traceback. The kept instance is never handed out: one that is raised would,
    through its traceback, keep the frames holding the old process group (and its TCPStore) alive."""
    return WorkerMembershipChanged(change.added_ips, change.removed_ips, change.previous_ips, change.current_ips,
                                   change.generation)


def wait(timeout: float, since: Optional[int] = None, interval: float = 0.05) -> Optional[WorkerMembershipChanged]:
    """Wait up to ``timeout`` seconds for a membership change; apply and return it, or ``None``.

    For code that caught a collective's error (a peer vanished) and wants the agent's account of
    the new world before re-initialising. The change is returned, never raised, while waiting.

    Args:
        timeout: seconds to wait.
        since: the generation the caller's process group was built for (see :func:`generation`).
            If a newer change was already applied, e.g. raised inside library code that swallowed
            it, that change is returned at once.
        interval: seconds between polls.
    """
    last = _Gate.last
    if since is not None and last is not None and last.generation > since:
        return _fresh(last)
    deadline = time.monotonic() + timeout
    _Gate.deferring += 1
    try:
        while True:
            change = poll()
            if change is not None or time.monotonic() >= deadline:
                return change
            time.sleep(interval)
    finally:
        _Gate.deferring -= 1


def _handler(_signum: int, _frame: object) -> None:
    if _Gate.deferring or not _Gate.armed:
        return
    change = poll()
    if change is not None:
        raise change


def install() -> None:
    """Install the :data:`DELIVERY_SIGNAL` handler that raises the change in the main thread (bootstrap calls it)."""
    signal.signal(DELIVERY_SIGNAL, _handler)


def arm_on_import() -> None:
    """Arm delivery when the user's code first imports ``runtime`` (or a module in it): wraps
    ``builtins.__import__`` until then (the bootstrap calls it just before the user's code). Only an
    absolute import counts (``level`` 0): a library's relative ``from .runtime import ...`` (torch's
    own ``torch._inductor.runtime``) is not ours. Imports made by ``runtime``'s own modules do not
    count either."""
    original = builtins.__import__

    def importing(name: str, globals: Optional[Mapping[str, Any]] = None, locals: Optional[Mapping[str, Any]] = None,
                  fromlist: Any = (), level: int = 0) -> Any:
        caller = str((globals or {}).get("__name__", ""))
        if level == 0 and (name == "runtime" or name.startswith("runtime.")) and not caller.startswith("runtime."):
            builtins.__import__ = original
            arm()
        return original(name, globals, locals, fromlist, level)

    builtins.__import__ = importing


def ignore() -> None:
    """Ignore delivery signals (``monitor_members=False``); :func:`poll` still works."""
    signal.signal(DELIVERY_SIGNAL, signal.SIG_IGN)


def finish() -> None:
    """The user's code returned (or raised): from here on no change is delivered. Blocks and ignores
    :data:`DELIVERY_SIGNAL` (the bootstrap calls it once the script or module is done), because a
    rank in its normal exit (atexit handlers, module teardown) cannot use a change, and because
    CPython's finalisation puts back the default action of every signal with a Python handler, which
    for a real-time signal is to terminate: a change arriving then would end a rank that finished its
    work with ``128 + SIGRTMIN + 4`` (CPython ``Modules/signalmodule.c``, ``_PySignal_Fini``, which
    leaves ``SIG_IGN`` alone)."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {DELIVERY_SIGNAL})
    signal.signal(DELIVERY_SIGNAL, signal.SIG_IGN)
