"""Controllers the live tests run on this machine as processes (Kueue's manager, the Trainer's and JobSet's, the
training operator, the second scheduler): a loopback readiness probe, a wait until ready that stops the process
and quotes its log when it does not get there, and a stop with a grace period."""

from __future__ import annotations

import shutil
import subprocess
import urllib.request
from collections.abc import Callable
from pathlib import Path

from testbed.cluster.waiting import Abort, Timeout, wait_for

LOG_TAIL = 4000
"""Characters of a process's log quoted when it exits or is not ready in time."""


def http_ok(url: str) -> bool:
    """Whether ``url`` (plain HTTP on loopback) answers 200 within 5 s."""
    with urllib.request.urlopen(url, timeout=5) as answer:  # noqa: S310 (loopback http)
        return bool(answer.status == 200)


def stop(process: subprocess.Popen[bytes], workdir: Path, grace: float = 10.0) -> None:
    """SIGTERM, SIGKILL after ``grace`` seconds; ``workdir`` is removed."""
    process.terminate()
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    shutil.rmtree(workdir, ignore_errors=True)


def await_ready(process: subprocess.Popen[bytes], log: Path, name: str, probe: Callable[[], bool], timeout: float,
                what: str, on_failure: Callable[[], None]) -> None:
    """Wait until ``probe()`` is true, ``timeout`` seconds at most; on any failure ``on_failure()`` (a stop) runs
    before the error goes on.

    Raises:
        Abort: the process exited (the message ends with its log's tail).
        Timeout: not ready in time (the same).
    """
    def ready() -> bool:
        if process.poll() is not None:
            raise Abort(f"{name} exited {process.returncode}:\n{log.read_text(errors='replace')[-LOG_TAIL:]}")
        return probe()

    try:
        wait_for(ready, timeout, what)
    except Timeout as late:
        tail = log.read_text(errors="replace")[-LOG_TAIL:]
        on_failure()
        raise Timeout(f"{late}; its log ends:\n{tail}") from late
    except BaseException:
        on_failure()
        raise
