"""The Automation API's failures, said so that a user knows what happened and the command that fixes it.

``pulumi.automation`` raises :class:`~pulumi.automation.CommandError` subclasses chosen from the CLI's
output (``pulumi/automation/errors.py``, ``create_command_error``): ``ConcurrentUpdateError`` for a
locked stack, ``StackNotFoundError``, and a plain ``CommandError`` for the rest, whose text is
``CommandResult.__str__`` (code, stdout, stderr). :func:`translated` turns them into
:class:`~runtime.workflow.errors.DeployError` at this one boundary, keeping Pulumi's own details:

* a locked stack: each lock as the file backend writes it (pulumi/pulumi ``pkg/backend/diy/lock.go``,
  ``checkForLock``: ``<lock file URL>: created by <user>@<host> (pid <pid>) at <RFC 3339 time>``), whether
  its process still runs when it is on this host, and the ``pulumi cancel`` that removes it (which, on a
  file backend, deletes the stack's lock files: ``CancelCurrentUpdate`` in ``pkg/backend/diy/backend.go``),
  with the state location and the stack's workspace;
* a wrong passphrase (``incorrect passphrase``, ``pkg/secrets/passphrase``): which passphrase was used;
* a provider plugin that could not be installed or found: the ``pulumi plugin install`` commands;
* a failed update: Pulumi's diagnostics (which go to stdout) and its error line.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Optional

from runtime.agent.errors import ConfigError
from runtime.workflow.errors import DeployError

PASSPHRASE = "PULUMI_CONFIG_PASSPHRASE"  # noqa: S105 - the variable's name, not a secret
PASSPHRASE_FILE = "PULUMI_CONFIG_PASSPHRASE_FILE"  # noqa: S105 - the variable's name
OUTPUT_TAIL = 2000
"""Characters of Pulumi's output quoted in a :class:`DeployError`."""
STDERR_MARK = "\n stderr: "
"""Where the CLI's stderr starts in the text of a ``CommandError`` (``CommandResult.__str__``)."""
STDOUT_MARK = "\n stdout: "
INSTALL_CLI = ("install it (https://www.pulumi.com/docs/install/: curl -fsSL https://get.pulumi.com | sh) and put it "
               "on PATH")
_LOCK = re.compile(r"^\s*(?P<file>\S+): created by (?P<user>[^@\s]*)@(?P<host>\S*) \(pid (?P<pid>\d+)\) at "
                   r"(?P<time>\S+)\s*$", re.MULTILINE)
_DIAGNOSTICS = re.compile(r"^Diagnostics:\n(?P<body>.*?)(?=^\S|\Z)", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Where:
    """Where a stack lives, for the commands a message gives.

    Attributes:
        backend_url: the state backend (``file://...``, ``s3://...``).
        work_dir: the workspace directory (its ``Pulumi.yaml`` names the project and the backend).
        passphrase: how the passphrase is given (e.g. ``the file /home/me/.trainplane/passphrase``).
        plugins: provider plugin name to version, as the program needs them.
    """

    backend_url: str
    work_dir: Path
    passphrase: str
    plugins: Mapping[str, str]


def pulumi_command(where: Where, stack: str, *args: str) -> str:
    """``pulumi ARGS`` for ``stack`` in its workspace and backend, as one shell line."""
    line = ["pulumi", *args, "--cwd", str(where.work_dir), "--stack", stack]
    return f"PULUMI_BACKEND_URL={shlex.quote(where.backend_url)} " + " ".join(shlex.quote(a) for a in line)


class translated:
    """Turn the Automation API's failures inside the block into :class:`DeployError` naming the stack and
    the operation (module docstring); ``DeployError`` and ``ConfigError`` pass as they are.

    Args:
        stack: the stack's name.
        operation: ``up``, ``outputs`` or ``destroy``.
        where: where the stack lives (called only on a failure).
    """

    def __init__(self, stack: str, operation: str, where: Callable[[], Where]) -> None:
        self.stack = stack
        self.operation = operation
        self.where = where

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Optional[type], exc: Optional[BaseException], _tb: object) -> None:
        if exc is None or isinstance(exc, (DeployError, ConfigError)):
            return
        message = explain(exc, self.stack, self.operation, self.where)
        if message is not None:
            raise DeployError(self.stack, self.operation, message) from exc


def explain(exc: BaseException, stack: str, operation: str, where: Callable[[], Where]) -> Optional[str]:
    """What ``exc`` means for ``stack`` and what to run, or ``None`` for an exception that is not Pulumi's."""
    from pulumi import automation as auto

    head = f"stack {stack!r} ({operation})"
    if isinstance(exc, FileNotFoundError) and "pulumi" in str(exc):
        return (f"{head}: KubernetesCompute deploys through the Pulumi Automation API, which runs the Pulumi CLI, "
                f"and no `pulumi` is on PATH: {INSTALL_CLI}")
    if not isinstance(exc, auto.CommandError):
        return None
    stdout, stderr = _streams(str(exc))
    if isinstance(exc, auto.ConcurrentUpdateError):
        return _locked(head, stack, stderr, where())
    if "incorrect passphrase" in stderr or "passphrase must be set" in stderr:
        w = where()
        return (f"{head}: the stack's secrets were encrypted with another passphrase than {w.passphrase}: give the "
                f"one it was created with in {PASSPHRASE} or {PASSPHRASE_FILE}; a stack whose passphrase is lost "
                f"can only be removed from the state: {pulumi_command(w, stack, 'stack', 'rm', '--force', '--yes')} "
                f"(its objects stay in the cluster until you delete them). Pulumi said: {_tail(stderr)}")
    if "plugin" in stderr and ("install" in stderr or "not found" in stderr):
        w = where()
        installs = " && ".join(f"pulumi plugin install resource {n} v{v}" for n, v in sorted(w.plugins.items()))
        return (f"{head}: a provider plugin could not be installed or found; install them where they can be "
                f"downloaded: {installs} (or each from a file with --file): Pulumi said: {_tail(stderr)}")
    diagnostics = _DIAGNOSTICS.search(stdout)
    detail = (diagnostics.group("body").strip() + "\n" if diagnostics else "") + stderr
    return (f"{head} failed: {_tail(detail)}\nthe stack keeps what was made: fix the cause and run the driver again, "
            f"or remove the job with KubernetesCompute(..., name={stack!r}).destroy()")


def _locked(head: str, stack: str, stderr: str, where: Where) -> str:
    locks = []
    for lock in _LOCK.finditer(stderr):
        line = (f"{lock['file']}: taken by {lock['user']}@{lock['host']} (pid {lock['pid']}) at {lock['time']}"
                + _stale(lock['host'], int(lock['pid'])))
        locks.append(line)
    held = ("; ".join(locks) if locks else _tail(stderr))
    cancel = pulumi_command(where, stack, "cancel", "--yes")
    return (f"{head}: the stack is locked by another Pulumi operation (a second driver of the same job, or one that "
            f"was interrupted): {held}. Wait for it to finish; if none is running, remove the lock: {cancel}")


def _stale(host: str, pid: int) -> str:
    """``", no longer running"`` when the lock was taken on this host by a process that is gone."""
    if host != socket.gethostname():
        return ""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return ", a process no longer running on this host: the lock is stale"
    except PermissionError:
        return ""
    return ", still running"


def _streams(text: str) -> tuple[str, str]:
    """``(stdout, stderr)`` of a ``CommandError``'s text (``CommandResult.__str__``)."""
    before, _, stderr = text.partition(STDERR_MARK)
    stdout = before.partition(STDOUT_MARK)[2]
    return stdout, (stderr if STDERR_MARK in text else text).strip()


def _tail(text: str) -> str:
    text = text.strip()
    return text if len(text) <= OUTPUT_TAIL else f"...{text[-OUTPUT_TAIL:]}"
