"""A node of the test cluster that really runs containers (issue 22): kubelet, containerd, runc, CNI, CoreDNS.

What runs, all on this machine, beside the control plane of a running test cluster (``lifecycle.Cluster``):

- containerd (Debian's package) with its own root, state, socket and CNI configuration under this node's state
  directory, ``runc`` as its runtime, the cgroupfs driver (the machine has cgroup v1 and no systemd) and
  :data:`images.PAUSE_IMAGE` as its sandbox image;
- the pod network: a Linux bridge :data:`BRIDGE` with :data:`GATEWAY` on :data:`POD_SUBNET`, given to pods by the
  CNI ``bridge`` plugin with ``host-local`` IP addresses (Debian's containernetworking-plugins);
- CoreDNS (its Go module, ``build.COREDNS``) outside the cluster with the admin kubeconfig, serving
  ``cluster.local`` from the API server on :data:`GATEWAY` port 53, which every pod reaches; the kubelet's
  ``clusterDNS``;
- the kubelet (k8s.io/kubernetes ``cmd/kubelet``, ``build.KUBELET``) registering node :data:`NODE` with the
  cluster's ``system:node:real-0`` certificate, its InternalIP :data:`GATEWAY` (a kubelet refuses a loopback
  node IP: "nodeIP can't be loopback address"), serving its API there with a certificate the cluster's CA signs,
  so the API server's ``logs``, ``exec`` and ``portforward`` reach it (``commands.apiserver``).

Two settings this machine needs: its root lacks ``CAP_SYS_RESOURCE``, so no process may lower its
``oom_score_adj`` (the kubelet asks -998 for every sandbox; runc 1.1.5 then fails with "can't get final child's
PID from pipe: EOF", crun names it: "write to /proc/self/oom_score_adj: Permission denied"), and containerd runs
with ``restrict_oom_score_adj`` (a container's score is never below containerd's own); runc, not crun, because
crun 1.8 refuses the machine's hybrid cgroup layout ("cgroups in hybrid mode not supported").

Which pods run here: the node is tainted :data:`TAINT` and labelled :data:`LABEL`. The taint keeps every pod that
does not ask for this node on the kwok nodes, so the other cluster tests (whose images do not exist here) behave
as before; a pod meant for this node tolerates the taint and selects the label (:func:`placement`), which also
keeps it off the kwok nodes, where it would only be marked Running.

What is not real: no kube-proxy runs, so Service cluster IPs do not route (pods find each other by the headless
Service's DNS names and pod IPs, as the DistributedJob's agents do), and pods cannot reach the API server, which
listens on 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from runtime.local.launch_plan import free_port
from testbed.cluster import images, reaper
from testbed.cluster.build import binary
from testbed.cluster.commands import Layout
from testbed.cluster.lifecycle import Cluster
from testbed.cluster.pki import issue_loopback_serving, kubeconfig
from testbed.cluster.podsbuild import NodeError, missing_packages
from testbed.cluster.waiting import die_with_parent, wait_for

NODE = "real-0"
"""The node's name (the kubelet's client certificate is ``system:node:real-0``)."""

LABEL = ("trainplane.dev/real-node", "true")
"""The label pods select to run here."""

TAINT = {"key": "trainplane.dev/real-node", "value": "true", "effect": "NoSchedule"}
"""The taint that keeps every other pod off this node."""

BRIDGE = "tpnode0"
POD_SUBNET = "10.245.0.0/24"
"""Pod addresses (apart from the kwok nodes' fake 10.244.0.0/16)."""
GATEWAY = "10.245.0.1"
"""The bridge's address: the pods' gateway and CoreDNS's listening address."""

CLUSTER_DOMAIN = "cluster.local"

START_TIMEOUT = 180.0
"""Seconds each component may take to get ready on a busy 2-core machine."""

STOP_GRACE = 10.0


def placement() -> dict[str, Any]:
    """What a pod needs to run on this node: ``node_selector`` and ``tolerations`` (DistributedJobArgs' fields and
    the pod spec's ``nodeSelector`` / ``tolerations``)."""
    return {"node_selector": {LABEL[0]: LABEL[1]},
            "tolerations": [{"key": TAINT["key"], "operator": "Equal", "value": TAINT["value"],
                             "effect": TAINT["effect"]}]}


@dataclass(frozen=True)
class NodeLayout:
    """The node's state directory and the files in it."""

    root: Path

    @property
    def socket(self) -> Path:
        """containerd's gRPC socket."""
        return self.root / "containerd.sock"

    def path(self, name: str) -> Path:
        """A file or directory of the node's state, e.g. ``kubelet`` (its root directory)."""
        return self.root / name

    def log(self, component: str) -> Path:
        """A component's combined output."""
        return self.root / "logs" / f"{component}.log"


def containerd_config(layout: NodeLayout) -> str:
    """containerd's configuration (version 2, containerd v1.6): its own directories and socket, the CRI plugin
    with the local sandbox image, runc through the cgroupfs driver, and this node's CNI configuration."""
    return f"""version = 2
root = "{layout.path('containerd/root')}"
state = "{layout.path('containerd/state')}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
                    "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{layout.socket}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{images.PAUSE_IMAGE}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{layout.path('cni')}"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
"""


def cni_config(layout: NodeLayout) -> dict[str, Any]:
    """The pod network: the ``bridge`` plugin on :data:`BRIDGE` as the pods' gateway, ``host-local`` addresses
    of :data:`POD_SUBNET` (its state under this node's directory), no masquerading (nothing leaves the machine)."""
    return {"cniVersion": "1.0.0", "name": "trainplane-real-node", "plugins": [
        {"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False, "hairpinMode": True,
         "ipam": {"type": "host-local", "dataDir": str(layout.path("cni-ipam")),
                  "ranges": [[{"subnet": POD_SUBNET, "gateway": GATEWAY}]], "routes": [{"dst": "0.0.0.0/0"}]}}]}


def corefile(admin_kubeconfig: Path) -> str:
    """CoreDNS's configuration: ``cluster.local`` and the reverse zones from the API server (its ``kubernetes``
    plugin, with the admin kubeconfig), on :data:`GATEWAY`; every other name is refused (no upstream here)."""
    return f""".:53 {{
    bind {GATEWAY}
    errors
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {admin_kubeconfig} trainplane-test
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
    cache 5
}}
"""


def kubelet_config(layout: NodeLayout, ca: Path, serving: Path, port: int, healthz: int) -> dict[str, Any]:
    """The kubelet's KubeletConfiguration (kubelet.config.k8s.io/v1beta1).

    Its API on :data:`GATEWAY`:``port`` takes only client certificates the cluster's CA signs (the API server's
    ``--kubelet-client-certificate``) and authorizes every such client (no anonymous access, no webhook); the
    eviction thresholds and image garbage collection are set so low that a busy shared disk never evicts the
    test's pods or deletes its local images (which no registry could bring back).
    """
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": GATEWAY, "port": port, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": healthz,
        "tlsCertFile": str(serving / "tls.crt"), "tlsPrivateKeyFile": str(serving / "tls.key"),
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                           "x509": {"clientCAFile": str(ca)}},
        "authorization": {"mode": "AlwaysAllow"},
        "containerRuntimeEndpoint": f"unix://{layout.socket}",
        "cgroupDriver": "cgroupfs", "cgroupRoot": "/", "failSwapOn": False, "failCgroupV1": False,
        "clusterDNS": [GATEWAY], "clusterDomain": CLUSTER_DOMAIN, "resolvConf": "/etc/resolv.conf",
        "registerWithTaints": [TAINT], "maxPods": 32,
        "podLogsDir": str(layout.path("pod-logs")),
        "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                         "nodefs.inodesFree": "1%"},
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False, "syncFrequency": "5s", "fileCheckFrequency": "5s",
        "nodeStatusUpdateFrequency": "5s", "enableServer": True, "protectKernelDefaults": False,
        "makeIPTablesUtilChains": False,
    }


def kubelet_command(kubelet: Path, layout: NodeLayout, config: Path, node_kubeconfig: Path) -> list[str]:
    """The kubelet's command line: what KubeletConfiguration cannot say (its root directory, name and address)."""
    return [str(kubelet), f"--config={config}", f"--kubeconfig={node_kubeconfig}",
            f"--root-dir={layout.path('kubelet')}", f"--cert-dir={layout.path('kubelet-certs')}",
            f"--hostname-override={NODE}", f"--node-ip={GATEWAY}", f"--node-labels={LABEL[0]}={LABEL[1]}", "--v=1"]


def remove_state(root: Path) -> None:
    """Unmount everything below ``root`` (the kubelet's volumes, containerd's snapshots), then remove it.

    Raises:
        NodeError: something is still mounted there (nothing is removed then, so no host directory a pod mounted
            could be deleted through a mount).
    """
    reaper.unmount_under(root)
    left = reaper.mounts_under(root)
    if left:
        raise NodeError(f"still mounted under {root}, not removed: {left}")
    shutil.rmtree(root, ignore_errors=True)


@dataclass
class RealNode:
    """The running node (see :func:`start`); ``stop`` takes it down and removes its state."""

    layout: NodeLayout
    cluster: Cluster
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    reaper_process: Optional[subprocess.Popen[bytes]] = None
    """What kills the shims and their containers should this process die first (``reaper.py``)."""

    @property
    def ctr(self) -> list[str]:
        """The ``ctr`` command talking to this node's containerd."""
        return ["ctr", "--address", str(self.layout.socket)]

    def run(self, name: str, argv: Sequence[str]) -> None:
        """Start component ``name`` (its output in ``layout.log(name)``); it dies with this process."""
        log = self.layout.log(name)
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            self.processes[name] = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT,
                                                    stdin=subprocess.DEVNULL,
                                                    preexec_fn=die_with_parent())  # noqa: PLW1509 (prctl only)

    def check_alive(self) -> None:
        """Raise :class:`NodeError` naming the first component that exited, with its log's end."""
        for name, process in self.processes.items():
            if process.poll() is not None:
                tail = self.layout.log(name).read_text(errors="replace").splitlines()[-25:]
                raise NodeError(f"{name} exited with {process.returncode}:\n" + "\n".join(tail))

    def wait(self, check: Any, what: str, timeout: float = START_TIMEOUT) -> Any:
        """Wait for ``check()`` to return a true value while every component lives."""
        def step() -> Any:
            self.check_alive()
            return check()
        return wait_for(step, timeout, what, interval=0.5)

    def _remove_containers(self) -> None:
        """Kill and delete every task and container in the CRI namespace (their shims then exit)."""
        ns = [*self.ctr, "-n", "k8s.io"]
        listed = subprocess.run([*ns, "containers", "list", "-q"], capture_output=True, text=True, check=False)
        for container in listed.stdout.split():
            subprocess.run([*ns, "tasks", "kill", "-s", "SIGKILL", container], capture_output=True, check=False)
        deadline = time.monotonic() + STOP_GRACE
        for container in listed.stdout.split():
            while time.monotonic() < deadline:
                gone = subprocess.run([*ns, "tasks", "delete", container], capture_output=True, text=True, check=False)
                if gone.returncode == 0 or "not found" in gone.stderr:
                    break
                time.sleep(0.2)
            subprocess.run([*ns, "containers", "delete", container], capture_output=True, check=False)

    def stop(self) -> None:
        """Stop the kubelet, remove every container, stop CoreDNS and containerd, kill any shim left, delete the
        bridge and remove the node's state."""
        kubelet = self.processes.pop("kubelet", None)
        if kubelet is not None:
            _terminate(kubelet)
        if "containerd" in self.processes and self.processes["containerd"].poll() is None:
            self._remove_containers()
        for process in reversed(list(self.processes.values())):
            _terminate(process)
        reaper.reap(str(self.layout.socket).encode(), BRIDGE, None)
        if self.reaper_process is not None:
            _terminate(self.reaper_process)
        remove_state(self.layout.root)


def _terminate(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _bridge() -> None:
    """Create :data:`BRIDGE` with :data:`GATEWAY` (so CoreDNS can listen there before the first pod exists)."""
    subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True, check=False)
    for command in (["ip", "link", "add", BRIDGE, "type", "bridge"],
                    ["ip", "addr", "add", f"{GATEWAY}/{POD_SUBNET.split('/')[1]}", "dev", BRIDGE],
                    ["ip", "link", "set", BRIDGE, "up"]):
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise NodeError(f"{' '.join(command)} failed: {done.stderr.strip()}")


def _node_ready(api: Any) -> bool:
    from kubernetes.client.exceptions import ApiException

    try:
        node = api.read_node(NODE)
    except ApiException as err:
        if err.status == 404:
            return False
        raise
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def start(cluster: Cluster, root: Path) -> RealNode:
    """Start the real node beside ``cluster`` with its state in ``root`` (made afresh) and wait until the node is
    Ready and both images are imported.

    Raises:
        NodeError: a package or build is missing, a component exited or a step failed (the message names it).
        Timeout: a component did not get ready in time.
    """
    from kubernetes import client, config

    missing = missing_packages()
    if missing:
        raise NodeError(f"Debian packages missing: {' '.join(missing)}; "
                        "run: python -m testbed.cluster build --with pods")
    remove_state(root)
    layout = NodeLayout(root)
    for directory in ("cni", "logs", "pod-logs", "images"):
        layout.path(directory).mkdir(parents=True, exist_ok=True)
    cluster_layout = Layout(cluster.state)
    pki = cluster_layout.pki
    node = RealNode(layout, cluster, reaper_process=reaper.start(str(layout.socket), BRIDGE, root))
    try:
        (layout.path("containerd.toml")).write_text(containerd_config(layout))
        (layout.path("cni") / "10-trainplane.conflist").write_text(json.dumps(cni_config(layout), indent=1))
        node.run("containerd", ["containerd", "--config", str(layout.path("containerd.toml"))])
        node.wait(lambda: layout.socket.exists() and subprocess.run(
            [*node.ctr, "version"], capture_output=True, check=False).returncode == 0, "containerd's socket")
        images.import_image(node.ctr, images.pause_rootfs(layout.path("images/pause")), images.PAUSE_IMAGE,
                            ["/usr/bin/sleep", "infinity"], layout.path("images"))
        images.import_image(node.ctr, images.python_rootfs(layout.path("images/python")), images.PYTHON_IMAGE,
                            [images.host_python()], layout.path("images"), images.python_env())
        _bridge()
        layout.path("Corefile").write_text(corefile(cluster.kubeconfig))
        node.run("coredns", [str(binary("coredns")), "-conf", str(layout.path("Corefile"))])
        node.wait(lambda: "CoreDNS-" in layout.log("coredns").read_text(errors="replace"), "CoreDNS to serve")
        serving = issue_loopback_serving(pki, layout.path("kubelet-serving"), NODE, ips=(GATEWAY,))
        port = free_port(GATEWAY)
        healthz = free_port("127.0.0.1", avoid=[port])
        kubelet_conf = layout.path("kubelet.json")
        kubelet_conf.write_text(json.dumps(kubelet_config(layout, pki.ca, serving, port, healthz), indent=1))
        node_kubeconfig = layout.path("kubelet.kubeconfig")
        node_kubeconfig.write_text(kubeconfig(pki, "kubelet", cluster.server))
        node.run("kubelet", kubelet_command(binary("kubelet"), layout, kubelet_conf, node_kubeconfig))
        api = client.CoreV1Api(config.new_client_from_config(str(cluster.kubeconfig)))
        node.wait(lambda: _node_ready(api), f"node {NODE} Ready")
    except BaseException:
        node.stop()
        raise
    return node


@contextlib.contextmanager
def running(cluster: Cluster, root: Path) -> Iterator[RealNode]:
    """The real node for the length of a ``with`` block (:func:`start`, then ``stop``)."""
    node = start(cluster, root)
    try:
        yield node
    finally:
        node.stop()

