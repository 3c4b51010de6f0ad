"""The process that owns one test cluster: ``python -m testbed.cluster.supervisor STATE_DIR [--parent PID]``.

It writes the certificates and kubeconfigs, starts etcd, the API server, the controller manager, the
scheduler and kwok (each dies with it: ``PR_SET_PDEATHSIG``), registers the nodes, waits until they are
Ready, creates the StorageClass of the host-path provisioner (``storage.py``), then writes ``STATE_DIR/ready``
(JSON: kubeconfig, server, pid). On SIGTERM or SIGINT, when a component exits, or when ``--parent`` is gone, it
stops every component (SIGTERM, then SIGKILL) and exits.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runtime.local.launch_plan import free_port
from testbed.cluster import commands, nodes, processes, storage
from testbed.cluster.build import binary
from testbed.cluster.commands import Layout, Ports
from testbed.cluster.pki import CLIENTS, kubeconfig, make_pki
from testbed.cluster.waiting import Abort, die_with_parent, wait_for

START_TIMEOUT = 300.0
"""Seconds each stage may take on a busy 2-core machine."""

STOP_GRACE = 10.0
"""Seconds from SIGTERM to SIGKILL for a component."""


def _ports() -> Ports:
    taken: list[int] = []
    for _ in range(6):
        taken.append(free_port("127.0.0.1", avoid=taken))
    return Ports(*taken)


def _https_ok(url: str, layout: Layout) -> bool:
    pki = layout.pki
    context = ssl.create_default_context(cafile=str(pki.ca))
    context.load_cert_chain(str(pki.cert("admin")), str(pki.key("admin")))
    with urllib.request.urlopen(url, context=context, timeout=5) as answer:  # noqa: S310 (loopback https)
        return bool(answer.status == 200)


class Supervisor:
    """Starts and stops one cluster's components (see the module docstring)."""

    def __init__(self, root: Path, parent: int | None) -> None:
        self.layout = Layout(root)
        self.parent = parent
        self.ports = _ports()
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self.stopping = threading.Event()

    def _start(self, name: str, argv: list[str]) -> None:
        log = self.layout.log(name)
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            self.children[name] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                   preexec_fn=die_with_parent())  # noqa: PLW1509 (prctl only)

    def _alive_or_raise(self) -> None:
        for name, child in self.children.items():
            if child.poll() is not None:
                tail = self.layout.log(name).read_text(errors="replace").splitlines()[-15:]
                raise Abort(f"{name} exited with {child.returncode}:\n" + "\n".join(tail))
        if self.stopping.is_set():
            raise Abort("stopped while starting")

    def _wait(self, check: Callable[[], Any], what: str) -> Any:
        def step() -> Any:
            self._alive_or_raise()
            return check()
        return wait_for(step, START_TIMEOUT, what)

    def start(self) -> dict[str, Any]:
        """Bring the cluster up; returns what ``ready`` holds."""
        layout, ports = self.layout, self.ports
        pki = make_pki(layout.pki.directory)
        server = commands.server_url(ports)
        for client in CLIENTS:
            layout.kubeconfig(client).write_text(kubeconfig(pki, client, server))
        self._start("etcd", commands.etcd(binary("etcd"), layout, ports))
        self._wait(lambda: processes.http_ok(f"http://127.0.0.1:{ports.etcd_client}/health"), "etcd's /health")
        self._start("kube-apiserver", commands.apiserver(binary("kube-apiserver"), layout, ports))
        self._wait(lambda: _https_ok(f"{server}/readyz", layout), "the API server's /readyz")
        self._start("kube-controller-manager",
                    commands.controller_manager(binary("kube-controller-manager"), layout, ports))
        self._start("kube-scheduler", commands.scheduler(binary("kube-scheduler"), layout, ports))
        self._start("kwok", commands.kwok(binary("kwok"), layout, ports))
        self._register_nodes()
        ready = {"kubeconfig": str(layout.kubeconfig()), "server": server, "pid": os.getpid()}
        tmp = layout.root / "ready.tmp"
        tmp.write_text(json.dumps(ready))
        tmp.replace(layout.root / "ready")
        return ready

    def _register_nodes(self) -> None:
        from kubernetes import client, config

        api = client.CoreV1Api(config.new_client_from_config(str(self.layout.kubeconfig())))
        for body in nodes.all_nodes():
            api.create_node(body)
        names = {n["metadata"]["name"] for n in nodes.all_nodes()}

        def all_ready() -> bool:
            ready = {n.metadata.name for n in api.list_node().items
                     if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])}
            return names <= ready

        self._wait(all_ready, f"nodes {sorted(names)} Ready")
        self._wait(lambda: api.read_namespaced_service_account("default", "default"),
                   "the default ServiceAccount (the controller manager's service-account controller)")
        storage.install(api.api_client)

    def run_until_stopped(self) -> None:
        """Watch the components and the parent until asked to stop."""
        while not self.stopping.wait(0.5):
            if self.parent is not None and os.getppid() != self.parent:
                return
            if any(child.poll() is not None for child in self.children.values()):
                return

    def stop(self) -> None:
        """Stop every component, newest first."""
        for child in reversed(list(self.children.values())):
            if child.poll() is None:
                child.terminate()
        for child in reversed(list(self.children.values())):
            try:
                child.wait(STOP_GRACE)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


def main(argv: list[str] | None = None) -> int:
    """Run a supervisor; exit code 0 after a requested stop, 1 when the cluster failed."""
    parser = argparse.ArgumentParser(prog="python -m testbed.cluster.supervisor")
    parser.add_argument("state", type=Path)
    parser.add_argument("--parent", type=int, default=None, help="exit when this process is no longer the parent")
    args = parser.parse_args(argv)
    supervisor = Supervisor(args.state, args.parent)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: supervisor.stopping.set())
    code = 0
    try:
        supervisor.start()
        supervisor.run_until_stopped()
    except Exception as err:
        print(f"test cluster failed: {err}", file=sys.stderr, flush=True)
        code = 1
    finally:
        supervisor.stop()
    return code


if __name__ == "__main__":
    sys.exit(main())
