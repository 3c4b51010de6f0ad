"""The ``pods`` part of the build (``python -m testbed.cluster build --with pods``): what the real node
(``realnode.py``) needs on this machine. Standard library only, like ``build.py``: it runs before the venv exists.

Debian's packages come from ``apt-get`` (installed only when missing, so a second run does nothing); the kubelet
and CoreDNS are built from their Go modules like every other tool (``build.KUBELET``, ``build.COREDNS``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from testbed.cluster.build import PARTS, build_all

PACKAGES = {"containerd": "containerd", "runc": "runc", "containernetworking-plugins": "/usr/lib/cni/bridge",
            "conntrack": "conntrack", "socat": "socat"}
"""Debian packages the node needs -> the command or file that shows each is installed (containerd 1.6, runc 1.1,
the CNI plugins 1.1 in Debian 12; conntrack and socat are what a kubelet's host is expected to have)."""


class NodeError(RuntimeError):
    """The real node could not be set up or started; the message names the step or component and its output."""


def missing_packages() -> list[str]:
    """The Debian packages of :data:`PACKAGES` not installed here."""
    return [name for name, probe in PACKAGES.items()
            if not (Path(probe).exists() if probe.startswith("/") else shutil.which(probe))]


def install_packages() -> list[str]:
    """Install the missing Debian packages with ``apt-get`` (skipped when all are present).

    Returns:
        the packages installed now.

    Raises:
        NodeError: apt-get failed (its output's end is in the message).
    """
    missing = missing_packages()
    if missing:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for command in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", *missing]):
            done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
            if done.returncode != 0:
                output = (done.stdout + done.stderr)[-3000:]
                raise NodeError(f"{' '.join(command)} failed ({done.returncode}):\n{output}")
    return missing


def build(report: Callable[[str], None] = print) -> dict[str, Path]:
    """The ``pods`` part of ``python -m testbed.cluster build --with pods``: the Debian packages, then the kubelet
    and CoreDNS (cached when built)."""
    installed = install_packages()
    report(f"debian packages: {'installed ' + ' '.join(installed) if installed else 'present'}")
    return build_all(PARTS["pods"], report=report)


