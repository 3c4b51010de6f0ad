"""Wrapper that runs inside every user process before the user's code. Standard library only.

Usage (by the agent): ``python -u -c STARTER SCRIPT [ARGS...]`` or ``python -u -c STARTER -m MODULE
[ARGS...]``, where :func:`starter` makes the ``runtime`` package importable without putting its
directory on PYTHONPATH (appended to ``sys.path``, after the installed packages, and only when it
is not there already), so the user's code sees the PYTHONPATH and ``sys.path`` torchrun gives it.
It ties the process's life to its
agent (Linux parent-death signal), installs the membership-change handler (``runtime.membership``),
trainplane's JAX cluster (``runtime.agent.execution.jaxcluster``, for ``jax.distributed.initialize()``) and,
in an elastic torch job, its ``env://`` rendezvous (``runtime.agent.execution.torchhooks``),
waits for a single-controller job's cluster if asked (``TRAINPLANE_WAIT_FOR``: the Ray head or
every Monarch worker accepts connections; ``TRAINPLANE_WAIT_RAY_NODES``: every node has joined the
Ray head), then runs the user's code as ``__main__`` exactly as
``python SCRIPT`` or ``python -m MODULE`` would (``sys.argv``, ``sys.path[0]``).

``python -u -c STARTER --exec COMMAND [ARGS...]`` runs a command that is not
Python (torchrun's ``--no-python``): after the parent-death signal it replaces itself with
``COMMAND`` (looked up on ``PATH``), which keeps the pid, the environment and that signal. Such a
process cannot take a membership change as an exception, so the delivery signal is ignored (the
disposition survives ``exec``); the new world is still written to ``TRAINPLANE_WORLD_FILE``.
"""

from __future__ import annotations

import builtins
import gc
import io
import os
import runpy
import socket
import sys
import time
import types
from typing import NoReturn, Sequence

from runtime.agent import contract
from runtime.agent.execution import delivery, jaxcluster, raynodes, storewait, torchhooks
from runtime.agent.execution.lifeline import die_with_parent, parent_pid
from runtime.agent.execution.starter import EXEC_FLAG, EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND

WAIT_TIMEOUT = 600.0
"""Seconds to wait for ``TRAINPLANE_WAIT_FOR``; a head that fails to start fails the job well before."""
WAIT_INTERVAL = 0.2
"""Seconds between connection attempts while waiting."""


def wait_for(endpoint: str, timeout: float, what: str = "the job's head") -> None:
    """Return once ``endpoint`` (``host:port``, ``[v6]:port``) accepts a TCP connection.

    Raises:
        SystemExit: it did not within ``timeout`` seconds (the message names it and ``what`` it
            is), or it is malformed.
    """
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit():
        raise SystemExit(f"trainplane: {contract.WAIT_FOR}={endpoint!r} is not host:port")
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=WAIT_INTERVAL * 5).close()
            return
        except OSError as exc:
            if time.monotonic() >= deadline:
                raise SystemExit(f"trainplane: {endpoint} ({what}) did not accept connections within "
                                 f"{timeout:g} s: {exc}") from None
        time.sleep(WAIT_INTERVAL)


def wait_for_driver(env: dict[str, str], timeout: float) -> None:
    """A single-controller driver: wait for ``TRAINPLANE_WAIT_FOR``'s endpoints (the Ray head, or
    every Monarch worker), then, for Ray, until every node in ``TRAINPLANE_WAIT_RAY_NODES`` has
    joined the head, all within ``timeout`` seconds.

    Raises:
        SystemExit: something did not come up in time; the message names what, and which nodes.
    """
    endpoints = [e for e in env.get(contract.WAIT_FOR, "").split(",") if e]
    deadline = time.monotonic() + timeout
    for endpoint in endpoints:
        what = "the job's head" if len(endpoints) == 1 else f"node {endpoints.index(endpoint)}'s worker"
        wait_for(endpoint, max(0.0, deadline - time.monotonic()), what)
    nodes = [n for n in env.get(contract.WAIT_RAY_NODES, "").split(",") if n]
    if not nodes:
        return
    try:
        report = raynodes.wait(env[contract.RAY_ADDRESS], nodes, max(1.0, deadline - time.monotonic()))
    except (RuntimeError, KeyError) as exc:
        raise SystemExit(f"trainplane: the Ray cluster could not be checked before the driver starts: {exc}") from None
    if report.missing:
        never = ", ".join(f"node {nodes.index(a)} ({a})" for a in dict.fromkeys(report.missing))
        raise SystemExit(f"trainplane: the Ray cluster has {len(report.alive)} of {len(nodes)} nodes after "
                         f"{timeout:g} s; never joined: {never}. The driver did not start")


def run(argv: Sequence[str]) -> None:
    """Run ``argv`` (``SCRIPT ARGS...`` or ``-m MODULE ARGS...``) as ``__main__``.

    Raises:
        SystemExit: with a usage message when ``argv`` is empty; or whatever the user code raises.
    """
    if not argv or (argv[0] == "-m" and len(argv) < 2):
        raise SystemExit("usage: python -m runtime.agent.execution.bootstrap SCRIPT [ARGS...] | -m MODULE [ARGS...]")
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        sys.path[0] = os.getcwd()  # as ``python -m`` puts it first
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return
    sys.argv = [argv[0], *argv[1:]]
    sys.path[0] = os.path.dirname(os.path.realpath(argv[0]))
    if not os.path.isfile(argv[0]):  # a directory or zip file with a __main__.py
        runpy.run_path(os.path.abspath(argv[0]), run_name="__main__")
        return
    # As ``python SCRIPT`` runs it: ``sys.argv[0]`` as typed (runpy.run_path would make it the
    # absolute path), ``__file__`` the typed path joined to the working directory, unnormalised,
    # ``sys.path[0]`` its real directory, a fresh ``__main__`` module.
    script = os.path.join(os.getcwd(), argv[0])
    main = types.ModuleType("__main__")
    main.__file__ = script
    main.__builtins__ = builtins  # type: ignore[attr-defined]
    sys.modules["__main__"] = main
    with io.open_code(script) as source:
        code = compile(source.read(), script, "exec")
    exec(code, main.__dict__)  # noqa: S102 - the job's own script, as python would run it


def exec_command(argv: Sequence[str]) -> NoReturn:
    """Replace this process with ``argv`` (an executable, looked up on ``PATH``, and its arguments).

    Membership-change signals are ignored from here on: the command is not Python.

    Raises:
        SystemExit: with a usage message when ``argv`` is empty; 127 (not found) or 126 (not
            executable) after printing the reason to stderr when the command cannot be run.
    """
    if not argv or not argv[0]:
        raise SystemExit(f"usage: python -m runtime.agent.execution.bootstrap {EXEC_FLAG} COMMAND [ARGS...]")
    delivery.ignore()
    try:
        os.execvp(argv[0], list(argv))  # noqa: S606 - the job's own command, as the user wrote it
    except OSError as exc:
        sys.stderr.write(f"trainplane: cannot run command {argv[0]!r}: {exc.strerror}\n")
        sys.stderr.flush()
        raise SystemExit(EXIT_NOT_FOUND if isinstance(exc, FileNotFoundError) else EXIT_NOT_EXECUTABLE) from None


def main() -> None:
    """Set the process up and run what ``sys.argv[1:]`` names (module docstring)."""
    die_with_parent(parent=parent_pid())
    if sys.argv[1:2] == [EXEC_FLAG]:
        exec_command(sys.argv[2:])
    if os.environ.get(contract.MONITOR_MEMBERS, "true") == "false":
        delivery.ignore()
    else:
        delivery.install()
    delivery.catch_up()  # a change that arrived while this process was starting: take it silently
    jaxcluster.install()  # jax.distributed.initialize() with no arguments finds this job
    storewait.install()  # a rank but 0 connects to rank 0's store as soon as it listens
    if os.environ.get(contract.JOIN_TIMEOUT):
        torchhooks.install_on_import(destroy=False)  # a new world's ranks meet, the late ones included
    waits = {k: os.environ.pop(k) for k in (contract.WAIT_FOR, contract.WAIT_RAY_NODES, contract.WAIT_TIMEOUT)
             if k in os.environ}
    if waits:
        wait_for_driver({**os.environ, **waits}, float(waits.get(contract.WAIT_TIMEOUT) or WAIT_TIMEOUT))
    delivery.arm_on_import()  # a change is raised once the user's code has imported runtime
    try:
        run(sys.argv[1:])
    finally:
        delivery.finish()  # a change arriving during the normal exit is not fatal
        collect_before_exit()


def collect_before_exit() -> None:
    """Collect the garbage the user's code left (reference cycles) while the interpreter is still whole.

    CPython's own last collection runs after it has marked itself finalizing, when a thread that is not Python's
    main thread can no longer take the GIL: one that tries is ended with ``pthread_exit`` (``Python/pylifecycle.c``,
    ``Py_FinalizeEx``: ``_PyRuntimeState_SetFinalizing``, then ``_PyGC_CollectIfEnabled``). A DDP model is such a
    cycle: freeing it then destroys the gloo process group, whose worker threads may still drop a tensor owned by
    Python, and the forced unwind through torch's C++ ends the rank with ``terminate called without an active
    exception`` (SIGABRT, exit 134) after its work was done. Collecting here frees those objects first, as a
    ``python SCRIPT`` whose garbage was already collected would.
    """
    gc.collect()


if __name__ == "__main__":
    main()
