"""Port reservations that hold across processes, so two local jobs started at the same moment never
pick the same ports. Standard library only (POSIX ``flock``).

A free port is only free until someone binds it, and a local job binds its ports seconds after it
picks them (torch's TCPStore binds ``MASTER_PORT`` when rank 0 starts). Every launcher on this
machine therefore takes an exclusive ``flock`` on one lock file per port it means to use, in one
directory shared by every user (:data:`LOCK_DIR`, sticky like ``/tmp``), and holds the locks while
its job runs. Another launcher that finds a port's lock held picks other ports. The kernel drops a
``flock`` when its holder exits, however it exits, so a killed launcher leaves no stale
reservation; the lock files themselves stay (empty, at most one per port number).
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from typing import Iterable, Optional

LOCK_DIR = os.path.join(tempfile.gettempdir(), "trainplane-ports")
"""Where the per-port lock files live (mode 1777: any user may add one, none may remove another's)."""


class PortReservation:
    """Ports this process holds locks on; :meth:`release` (or exit) frees them.

    Attributes:
        ports: the ports reserved, ascending.
    """

    def __init__(self, ports: Iterable[int], fds: Iterable[int]) -> None:
        self.ports = tuple(sorted(ports))
        self._fds = list(fds)

    def release(self) -> None:
        """Drop every lock (idempotent)."""
        fds, self._fds = self._fds, []
        for fd in fds:
            os.close(fd)


def reserve(ports: Iterable[int], lock_dir: str = LOCK_DIR) -> Optional[PortReservation]:
    """Lock every port of ``ports`` for this process, or none of them.

    Args:
        ports: TCP port numbers (for every address: a lock is per number).
        lock_dir: the shared lock directory (tests point it elsewhere).

    Returns:
        The reservation, or ``None`` when another process holds a lock on one of the ports (then
        nothing stays locked).

    Raises:
        OSError: the lock directory or a lock file cannot be created or opened.
    """
    _make_shared_dir(lock_dir)
    wanted = sorted(set(ports))
    fds: list[int] = []
    for port in wanted:
        fd = try_lock(os.path.join(lock_dir, f"{port}.lock"))
        if fd is None:
            PortReservation((), fds).release()
            return None
        fds.append(fd)
    return PortReservation(wanted, fds)


def try_lock(path: str) -> Optional[int]:
    """An exclusive ``flock`` on ``path`` (created, empty, if missing): the open descriptor holding
    it (close it to release), or ``None`` when another process holds it.

    Raises:
        OSError: the file cannot be created or opened.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o444)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _make_shared_dir(path: str) -> None:
    """Create ``path`` with mode 1777 if missing (the umask would narrow ``makedirs``' mode)."""
    if os.path.isdir(path):
        return
    try:
        os.makedirs(path)
    except FileExistsError:
        return
    os.chmod(path, 0o1777)  # noqa: S103 - shared by every user, sticky as /tmp is
