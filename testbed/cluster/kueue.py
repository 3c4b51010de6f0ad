"""Kueue's manager, built from its Go module at the add-on's release, run as a process against the test cluster
with the manager configuration the ``Kueue`` add-on renders (issue 21, item 1, Kueue).

What comes from where:

- the binary: ``sigs.k8s.io/kueue/cmd/kueue`` at ``versions.KUEUE``, built like every tool (``build.py``);
- the CRDs and the webhook configurations: generated with controller-gen from the same module, as upstream's
  ``Makefile`` (``manifests``) generates ``config/components/crd/bases`` and ``config/components/webhook``;
- the configuration: the YAML string the add-on hands its chart (``chart_values``), read back as it is, with
  only what running outside a pod changes (:data:`OUT_OF_CLUSTER`).

The manager is not one of ``build.TOOLS`` (``python -m testbed.cluster build`` leaves it out, so CI does not
build it): its first build took 789 s (13 min 10 s; 7 min 55 s user and 1 min 18 s system CPU, module downloads
included) on this 2-core machine while CI's own run and other test runs went on beside it (load average 16 to 90);
a cached one is found at once. ``tests/cluster/live_kueue.py`` runs it, by path.

Out of the Helm release this leaves unexercised: the chart's templates themselves (Deployment, Service,
RBAC, the kueue-system namespace's objects, its webhook Service and the cert-controller's certificate
rotation), the visibility API server, and the CRDs' conversion webhooks (v1beta1 objects are not used). The
webhooks here call ``https://127.0.0.1:<port>`` with a certificate the cluster's CA signs, where the chart's
call its Service, and each admits only the namespaces the caller names (the chart's admit every namespace
but ``kube-system`` and Kueue's own), so other tests' objects never depend on this manager.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testbed.cluster import processes, versions, webhooks
from testbed.cluster.build import GoTool, _go_env, binary, build_tool, tool_dir
from testbed.cluster.paths import cache_root
from testbed.cluster.pki import Pki, issue_loopback_serving
from testbed.cluster.waiting import die_with_parent

KUEUE_TOOL = GoTool("kueue", "sigs.k8s.io/kueue", versions.KUEUE, ("sigs.k8s.io/kueue/cmd/kueue",),
                    ldflags=(f"sigs.k8s.io/kueue/pkg/version.GitVersion={versions.KUEUE}",))
"""The manager's build (upstream's ``Makefile`` sets ``pkg/version.GitVersion`` the same way)."""

CRD_PATHS = "sigs.k8s.io/kueue/apis/..."
WEBHOOK_PATHS = "sigs.k8s.io/kueue/pkg/controller/...;sigs.k8s.io/kueue/pkg/webhooks/..."
"""What upstream's ``manifests`` target hands controller-gen (``./apis/...``; the webhook markers live under
``./pkg/controller/...`` and ``./pkg/webhooks/...``)."""

OUT_OF_CLUSTER = ("health", "metrics", "webhook", "leaderElection", "internalCertManagement")
"""The settings of the rendered config a process outside a pod replaces: its three listeners move to free
loopback ports (the webhook's with this machine's certificate), it runs alone (no leader election), and the
certificates are the test's (the chart's cert-controller writes a Secret for the in-cluster Service name)."""
FEATURE_GATES = "VisibilityOnDemand=false"
"""The visibility API server wants its own certificates at ``/visibility``, and the cluster registers no
APIService for it: it is left off."""
METRICS_CERTS = Path("kueue/metrics/certs")
"""Where Kueue v0.19.2 reads its metrics certificate when it does not make its own (``cmd/kueue/main.go``:
``/etc/kueue/metrics/certs``): provided under ``/etc`` in a private mount namespace of the manager only."""


@dataclass(frozen=True)
class Manifests:
    """The generated CRD files and the webhook configurations (``manifests.yaml``)."""

    crds: tuple[Path, ...]
    webhooks: Path


def manifests() -> Manifests:
    """Generate (once per release) Kueue's CRDs and webhook configurations with controller-gen, in the module the
    manager was built in (its dependencies are in the module cache then).

    Raises:
        BuildError: the build or controller-gen failed.
    """
    build_tool(KUEUE_TOOL)
    out = cache_root() / f"kueue-manifests-{versions.KUEUE}-{versions.CONTROLLER_TOOLS}"
    if not (out / ".done").exists():
        shutil.rmtree(out, ignore_errors=True)
        src = tool_dir(KUEUE_TOOL) / "src"
        for generator, paths, kind in (("crd:generateEmbeddedObjectMeta=true", CRD_PATHS, "crd"),
                                       ("webhook", WEBHOOK_PATHS, "webhook")):
            subprocess.run([str(binary("controller-gen")), generator, f"paths={paths}",
                            f"output:{kind}:artifacts:config={out / kind}"], cwd=src, env=_go_env(src), check=True,
                           capture_output=True, text=True)
        (out / ".done").write_text(f"{KUEUE_TOOL.module}@{KUEUE_TOOL.version}\n")
    return Manifests(tuple(sorted((out / "crd").glob("*.yaml"))), out / "webhook" / "manifests.yaml")


def manager_binary() -> Path:
    """The built manager (building it first when it is not cached).

    Raises:
        BuildError: the build failed.
    """
    return build_tool(KUEUE_TOOL)[0] / "kueue"


def local_config(rendered: str, health: int, metrics: int, webhook: int, cert_dir: Path) -> dict[str, Any]:
    """The add-on's rendered manager config (the YAML string of its chart values) with :data:`OUT_OF_CLUSTER`
    replaced for a process on this machine; every other setting is the add-on's."""
    config = copy.deepcopy(yaml.safe_load(rendered))
    config.update({
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics}"},
        "webhook": {"host": "127.0.0.1", "port": webhook, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
    })
    return dict(config)


def webhook_configurations(path: Path, port: int, ca: Path, namespaces: Sequence[str]) -> list[dict[str, Any]]:
    """The generated webhook configurations pointed at the manager on ``127.0.0.1:port`` (trusting ``ca``), each
    webhook admitting only ``namespaces``; named ``kueue-...`` as the chart names them."""
    return webhooks.pointed_at_local(path.read_text(), "kueue", port, ca, namespaces)



@dataclass
class KueueManager:
    """One running manager process (see :func:`start`)."""

    process: subprocess.Popen[bytes]
    workdir: Path
    log: Path
    webhook_port: int
    config: dict[str, Any]

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM, SIGKILL after ``grace`` seconds; the private mounts go with the process."""
        processes.stop(self.process, self.workdir, grace)


def start(rendered: str, kubeconfig: Path, pki: Pki, ports: Sequence[int], timeout: float = 180.0) -> KueueManager:
    """Start the manager with the rendered config on ``ports`` (health, metrics, webhook) and wait until it is
    ready (``/readyz``: its webhook server listens).

    The process runs in a private mount namespace (``unshare --mount``) whose ``/etc`` is an overlay holding
    :data:`METRICS_CERTS`, so nothing outside the process changes; it dies with the thread that started it.

    Raises:
        Timeout: not ready in time (the message ends with the log's tail).
        Abort: the process exited (the same).
    """
    health, metrics, webhook = ports
    workdir = Path(tempfile.mkdtemp(prefix="kueue-"))
    certs = issue_loopback_serving(pki, workdir / "certs", "kueue-webhook")
    upper, work = workdir / "etc-upper", workdir / "etc-work"
    issue_loopback_serving(pki, upper / METRICS_CERTS, "kueue-metrics")
    work.mkdir()
    config = local_config(rendered, health, metrics, webhook, certs)
    (workdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    command = (f"mount -t overlay overlay -o lowerdir=/etc,upperdir={upper},workdir={work} /etc && "
               f'exec "$0" --config={workdir / "config.yaml"} --kubeconfig={kubeconfig} '
               f"--feature-gates={FEATURE_GATES} --zap-log-level=2")
    log = workdir / "kueue.log"
    with log.open("ab") as out:
        process = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", command,
                                    str(manager_binary())],
                                   stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env={**os.environ}, preexec_fn=die_with_parent())  # noqa: PLW1509 (prctl only)
    manager = KueueManager(process, workdir, log, webhook, config)

    processes.await_ready(process, log, "kueue", lambda: processes.http_ok(f"http://127.0.0.1:{health}/readyz"),
                          timeout, "Kueue's manager to be ready", manager.stop)
    return manager
