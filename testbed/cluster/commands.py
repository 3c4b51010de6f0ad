"""The control plane's command lines, decided apart from the code that runs them.

Every component listens on 127.0.0.1 only, on ports chosen when the cluster starts. The flags follow
what envtest (sigs.k8s.io/controller-runtime, pkg/internal/testing/controlplane/apiserver.go) gives its
API server, plus the controller manager, the scheduler and kwok, which envtest does not run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from testbed.cluster import storage
from testbed.cluster.pki import Pki

SERVICE_CIDR = "10.0.0.0/24"
"""Service cluster IPs (``kubernetes`` gets 10.0.0.1)."""

POD_CIDR = "10.244.0.0/16"
"""Pod IPs kwok hands out (nothing routes them: no pod runs)."""


@dataclass(frozen=True)
class Ports:
    """The loopback ports of one cluster's components."""

    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int
    kwok: int


@dataclass(frozen=True)
class Layout:
    """One cluster's state directory and the files in it."""

    root: Path

    @property
    def pki(self) -> Pki:
        """Certificates and keys."""
        return Pki(self.root / "pki")

    @property
    def etcd_data(self) -> Path:
        """etcd's data directory."""
        return self.root / "etcd"

    def kubeconfig(self, client: str = "admin") -> Path:
        """The kubeconfig of ``client`` (``admin`` is the one users and tests get)."""
        return self.root / ("kubeconfig" if client == "admin" else f"{client}.kubeconfig")

    def log(self, component: str) -> Path:
        """A component's combined stdout and stderr."""
        return self.root / "logs" / f"{component}.log"


def server_url(ports: Ports) -> str:
    """The API server's address on this machine."""
    return f"https://127.0.0.1:{ports.apiserver}"


def etcd(bin_path: Path, layout: Layout, ports: Ports) -> list[str]:
    """etcd, single member, no fsync (the data is thrown away with the cluster)."""
    client = f"http://127.0.0.1:{ports.etcd_client}"
    peer = f"http://127.0.0.1:{ports.etcd_peer}"
    return [str(bin_path), "--name=trainplane-test", f"--data-dir={layout.etcd_data}",
            f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=trainplane-test={peer}", "--unsafe-no-fsync", "--log-level=warn"]


def apiserver(bin_path: Path, layout: Layout, ports: Ports) -> list[str]:
    """kube-apiserver with client-certificate authentication, RBAC and the Node authorizer; it calls a kubelet
    (``logs``, ``exec``, ``portforward`` of the real node's pods, ``realnode.py``) at the node's InternalIP with
    its own client certificate and checks the kubelet's serving certificate against the cluster's CA."""
    pki = layout.pki
    return [str(bin_path), f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={ports.apiserver}",
            f"--cert-dir={layout.root / 'apiserver-certs'}",
            f"--tls-cert-file={pki.cert('apiserver')}", f"--tls-private-key-file={pki.key('apiserver')}",
            f"--client-ca-file={pki.ca}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki.service_account_pub}",
            f"--service-account-signing-key-file={pki.service_account_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}", "--authorization-mode=Node,RBAC",
            "--allow-privileged=true", "--endpoint-reconciler-type=none", "--profiling=false",
            f"--kubelet-client-certificate={pki.cert('apiserver-kubelet-client')}",
            f"--kubelet-client-key={pki.key('apiserver-kubelet-client')}",
            f"--kubelet-certificate-authority={pki.ca}", "--kubelet-preferred-address-types=InternalIP"]


def _component_auth(layout: Layout, client: str) -> list[str]:
    config = layout.kubeconfig(client)
    return [f"--kubeconfig={config}", f"--authentication-kubeconfig={config}",
            f"--authorization-kubeconfig={config}", "--bind-address=127.0.0.1", "--leader-elect=false"]


def controller_manager(bin_path: Path, layout: Layout, ports: Ports) -> list[str]:
    """kube-controller-manager: every default controller (Job, StatefulSet, EndpointSlice, garbage
    collector, service accounts and their tokens, node lifecycle, ...), each with its own credentials; and the
    host-path provisioner for the claims of one StorageClass (``storage.py``)."""
    pki = layout.pki
    return [str(bin_path), *_component_auth(layout, "controller-manager"), f"--secure-port={ports.controller_manager}",
            f"--service-account-private-key-file={pki.service_account_key}", f"--root-ca-file={pki.ca}",
            f"--cluster-signing-cert-file={pki.ca}", f"--cluster-signing-key-file={pki.ca_key}",
            "--use-service-account-credentials=true", "--cluster-name=trainplane-test",
            f"--service-cluster-ip-range={SERVICE_CIDR}", "--profiling=false", *storage.CONTROLLER_MANAGER_FLAGS]


def scheduler(bin_path: Path, layout: Layout, ports: Ports) -> list[str]:
    """kube-scheduler with its default profile (taints, resources, affinity)."""
    return [str(bin_path), *_component_auth(layout, "scheduler"), f"--secure-port={ports.scheduler}",
            "--profiling=false"]


def kwok(bin_path: Path, layout: Layout, ports: Ports) -> list[str]:
    """kwok managing only the nodes annotated ``kwok.x-k8s.io/node: fake`` (``nodes.py``), with its
    default stages: nodes Ready with leases, pods Running and Ready once bound, Job pods Succeeded."""
    return [str(bin_path), f"--kubeconfig={layout.kubeconfig()}",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            f"--cidr={POD_CIDR}", "--node-ip=127.0.0.1", "--node-lease-duration-seconds=40",
            f"--server-address=127.0.0.1:{ports.kwok}"]
