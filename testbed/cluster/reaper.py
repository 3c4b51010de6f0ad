"""What outlives a killed test run on the real node, removed once that run is gone.

containerd and the kubelet die with the test run (``PR_SET_PDEATHSIG``), but containerd's shims re-parent
themselves away from it, and each keeps its containers' processes alive. So the real node starts a reaper
(:func:`start`), a process of its own session that waits for the test run to end and then kills every process
whose command line names the node's containerd socket (the shims: ``-address <socket>``) with all their
descendants, deepest first, deletes the node's bridge and unmounts what is mounted below its directory (the pods'
network namespaces, containerd's snapshots, the kubelet's volumes). A run that stops the node itself (``RealNode.stop``)
stops the reaper too; the reaper acts only when its parent is gone.

Run as ``python -m testbed.cluster.reaper --parent PID --marker TEXT [--bridge NAME] [--root DIR]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

REPO_ROOT = Path(__file__).resolve().parents[2]
POLL = 0.5
"""Seconds between looks at whether the parent is gone."""


def marked(marker: bytes) -> list[int]:
    """The pids of the processes whose command line holds ``marker`` (this process excepted)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                if marker in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
    return pids


def descendants(pid: int) -> list[int]:
    """Every descendant of ``pid`` (``/proc/<pid>/task/*/children``), the deepest first."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                for child in (task / "children").read_text().split():
                    found = [*descendants(int(child)), int(child), *found]
    return found


def mounts_under(root: Path) -> list[str]:
    """Mount points at or below ``root`` (from ``/proc/self/mountinfo``), deepest first."""
    found = []
    prefix = str(root.resolve())
    with open("/proc/self/mountinfo") as info:
        for line in info:
            point = line.split()[4].encode().decode("unicode_escape")
            if point == prefix or point.startswith(prefix + "/"):
                found.append(point)
    return sorted(found, key=len, reverse=True)


def unmount_under(root: Path) -> None:
    """Unmount (lazily) everything :func:`mounts_under` finds below ``root``."""
    for point in mounts_under(root):
        subprocess.run(["umount", "--lazy", point], capture_output=True, check=False)


def reap(marker: bytes, bridge: Optional[str], root: Optional[Path]) -> list[int]:
    """SIGKILL each process :func:`marked` finds, after its descendants, delete ``bridge`` and unmount what is
    mounted below ``root`` (each when given); returns the pids signalled."""
    killed = []
    for pid in marked(marker):
        for victim in [*descendants(pid), pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)
                killed.append(victim)
    if bridge:
        subprocess.run(["ip", "link", "delete", bridge], capture_output=True, check=False)
    if root is not None:
        unmount_under(root)
    return killed


def start(marker: str, bridge: Optional[str], root: Optional[Path]) -> subprocess.Popen[bytes]:
    """Start a reaper for this process: once this process is gone, it reaps ``marker``'s processes, ``bridge`` and
    the mounts below ``root``. It runs in a session of its own, so a signal to this process's group does not reach
    it."""
    return subprocess.Popen([sys.executable, "-m", "testbed.cluster.reaper", "--parent", str(os.getpid()),
                             "--marker", marker, *(["--bridge", bridge] if bridge else []),
                             *(["--root", str(root)] if root is not None else [])],
                            cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def main(argv: Optional[list[str]] = None) -> None:
    """Wait for ``--parent`` to go (this process re-parented), then :func:`reap`."""
    parser = argparse.ArgumentParser(prog="python -m testbed.cluster.reaper")
    parser.add_argument("--parent", type=int, required=True, help="the pid whose end starts the reaping")
    parser.add_argument("--marker", required=True, help="text on the command lines of the processes to kill")
    parser.add_argument("--bridge", help="a network bridge to delete afterwards")
    parser.add_argument("--root", type=Path, help="a directory to unmount everything below afterwards")
    args = parser.parse_args(argv)
    while os.getppid() == args.parent:
        time.sleep(POLL)
    reap(args.marker.encode(), args.bridge, args.root)


if __name__ == "__main__":
    main()
