"""ExitWatch: the launcher's supervisor wakes when an agent exits, not at its next look."""

from __future__ import annotations

import subprocess
import sys

import pytest

from runtime.local.exits import ExitWatch

pytestmark = pytest.mark.process

HANG = [sys.executable, "-c", "import sys; sys.stdin.read()"]
"""A child that runs until its stdin closes."""


def test_an_exit_wakes_the_wait_and_its_code_is_seen() -> None:
    """A running child does not wake the wait (it times out: False); once the child exits, the wait
    answers True with the child reaped (its returncode set, poll() agrees)."""
    proc = subprocess.Popen(HANG, stdin=subprocess.PIPE)
    try:
        watch = ExitWatch()
        watch.watch(proc)
        assert watch.wait(0.2) is False
        assert proc.returncode is None
        proc.stdin.close()  # type: ignore[union-attr]
        assert watch.wait(60) is True
        assert proc.returncode == 0 and proc.poll() == 0
    finally:
        proc.kill()
        proc.wait()


def test_an_exit_before_the_wait_is_not_missed() -> None:
    """A child that exited (and was reaped) before wait() is called wakes that call at once; watching
    it again changes nothing, and a later wait with no new exit times out."""
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    watch = ExitWatch()
    watch.watch(proc)
    watch.watch(proc)
    assert watch.wait(60) is True
    assert proc.returncode == 3
    assert watch.wait(0.1) is False


def test_one_of_several_exiting_wakes_the_wait() -> None:
    """Of two children, the one that exits wakes the wait; the other is still running."""
    hang = subprocess.Popen(HANG, stdin=subprocess.PIPE)
    quick = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        watch = ExitWatch()
        watch.watch(hang)
        watch.watch(quick)
        assert watch.wait(60) is True
        assert quick.returncode == 0 and hang.poll() is None
    finally:
        hang.kill()
        hang.wait()
