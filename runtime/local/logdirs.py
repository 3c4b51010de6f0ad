"""Where local jobs write their logs by default, and how long old job directories are kept.
Standard library only.

Without ``--log-dir`` (or ``LocalCompute(log_dir=...)``), a job writes to ``<base>/<job id>/``,
where the base, :func:`default_base`, is ``trainplane-<uid>`` in the system's temporary directory
(``$TMPDIR``, else ``/tmp``): one per user, mode 0700, so no user reads or fills another's. Each
new job there first removes the oldest job directories beyond :data:`KEEP_JOBS`, by modification
time, skipping those of jobs still running (each running job holds a ``flock`` on its directory's
:data:`LOCK_FILE`). A directory given with ``--log-dir`` is the user's and is never pruned (each run still gets
a directory of its own in it, as under torchrun).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile

from runtime.local.reservation import try_lock

KEEP_JOBS = 20
"""Job directories kept in the default base: the newest ones; older ones go when a job starts."""
LOCK_FILE = ".running"
"""The file in a job's directory whose ``flock`` a running job holds."""


def default_base() -> str:
    """This user's base directory for job logs, created mode 0700 if missing.

    Raises:
        RuntimeError: it exists but is not a directory this user owns with mode 0700 (another user
            made it, or it is a symlink): names it and the fix.
    """
    base = os.path.join(tempfile.gettempdir(), f"trainplane-{os.getuid()}")
    with contextlib.suppress(FileExistsError):
        os.mkdir(base, 0o700)
    info = os.lstat(base)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
        raise RuntimeError(f"{base} is not a private directory of this user (uid {os.getuid()}, mode 0700); remove "
                           f"it, or pass --log-dir")
    return base


def hold(job_dir: str) -> int:
    """Mark ``job_dir`` as a running job's (so pruning skips it): the descriptor holding its lock,
    to close when the job is over.

    Raises:
        RuntimeError: another process holds it: a job of the same name is running there.
        OSError: the lock file cannot be created.
    """
    fd = try_lock(os.path.join(job_dir, LOCK_FILE))
    if fd is None:
        raise RuntimeError(f"--job-name: a job writing to {job_dir} is still running; give this job another name")
    return fd


def prune(base: str, keep: int = KEEP_JOBS) -> list[str]:
    """Remove the oldest job directories in ``base`` beyond the newest ``keep``, except running
    jobs' (:func:`hold`); return the paths removed. Jobs started at the same moment may prune at
    once: a directory another one removed first is skipped."""
    entries = []
    for entry in os.scandir(base):
        with contextlib.suppress(FileNotFoundError):  # another job's pruning removed it meanwhile
            if entry.is_dir(follow_symlinks=False):
                entries.append((entry.stat(follow_symlinks=False).st_mtime, entry.path))
    removed = []
    for _, path in sorted(entries, reverse=True)[keep:]:
        try:
            fd = try_lock(os.path.join(path, LOCK_FILE))
        except FileNotFoundError:
            continue  # a job started at the same moment pruned it first
        if fd is None:
            continue  # still running
        shutil.rmtree(path, ignore_errors=True)
        os.close(fd)
        removed.append(path)
    return removed
