"""Kubeflow Trainer v2's and JobSet's controller managers, built from their Go modules at the ``TrainerV2`` add-on's
releases, run as processes against the test cluster (issue 24, item 5).

What comes from where:

- the binaries: ``github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager`` (v2.3.0) and ``sigs.k8s.io/jobset``
  (v0.12.0, its ``main.go``) built in one module (:data:`TRAINER_TOOL`; the Trainer's go.mod requires that very
  JobSet, so the two share every dependency; JobSet is built with the Trainer's k8s.io v0.36.2 where its own go.mod
  says v0.36.0);
- the CRDs: the files each module ships (``crds.py``);
- the webhook configurations: the ones each module ships as its ``make manifests`` generated them (kubeflow/trainer
  v2.3.0 ``manifests/base/webhook/manifests.yaml``, kubernetes-sigs/jobset v0.12.0
  ``config/components/webhook/manifests.yaml``), pointed at ``https://127.0.0.1:<port>`` with a serving certificate
  the cluster's CA signs, each admitting only the namespaces the caller names;
- the configuration: each release's own (kubeflow/trainer ``manifests/base/manager/controller_manager_config.yaml``,
  jobset ``config/components/manager/controller_manager_config.yaml``) with only what a process outside a pod
  changes (:data:`OUT_OF_CLUSTER`): loopback listeners on free ports, no leader election, certificates from the
  test's PKI instead of each manager's own rotation (which writes a Secret for its in-cluster Service name).

Not one of ``build.TOOLS``: ``python -m testbed.cluster build --with trainer`` builds it. Its first build took 903 s
(15 min 3 s wall, module downloads included) on this 2-core machine at load average 35 to 160; again with an
empty Go build cache (modules downloaded), 242 s wall (184 s user, 40 s system CPU) at load 2 to 60.
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
from testbed.cluster.build import GoTool, build_tool
from testbed.cluster.crds import _download
from testbed.cluster.pki import Pki, issue_loopback_serving
from testbed.cluster.waiting import die_with_parent

TRAINER_MODULE = "github.com/kubeflow/trainer/v2"
JOBSET_MODULE = "sigs.k8s.io/jobset"
TRAINER_TOOL = GoTool("trainer", TRAINER_MODULE, versions.TRAINER,
                      (f"{TRAINER_MODULE}/cmd/trainer-controller-manager", JOBSET_MODULE),
                      requires=((JOBSET_MODULE, versions.JOBSET),),
                      ldflags=(f"{JOBSET_MODULE}/pkg/version.GitVersion={versions.JOBSET}",))
"""Both managers' build (jobset's ``Makefile`` sets ``pkg/version.GitVersion`` the same way)."""

OUT_OF_CLUSTER = ("health", "metrics", "webhook", "leaderElection", "certManagement", "internalCertManagement")
"""The settings of a release's config a process outside a pod replaces."""


@dataclass(frozen=True)
class Manager:
    """What differs between the two managers: the binary, where its release keeps its config and webhooks, and
    the config key that turns its own certificate management off."""

    name: str
    binary: str
    module: str
    version: str
    config: str
    webhooks: str
    cert_management: str


TRAINER = Manager("trainer", "trainer-controller-manager", TRAINER_MODULE, versions.TRAINER,
                  "manifests/base/manager/controller_manager_config.yaml", "manifests/base/webhook/manifests.yaml",
                  "certManagement")
JOBSET = Manager("jobset", "jobset", JOBSET_MODULE, versions.JOBSET,
                 "config/components/manager/controller_manager_config.yaml",
                 "config/components/webhook/manifests.yaml", "internalCertManagement")


def module_dir(module: str, version: str) -> Path:
    """The directory of ``module`` at ``version`` in the module cache (downloaded if needed; read-only).

    Raises:
        BuildError: go could not download it.
    """
    work = Path(tempfile.mkdtemp(prefix="trainer-dl-"))
    try:
        return _download(module, version, work, "Dir")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def module_file(manager: Manager, inside: str) -> Path:
    """A file of the manager's module at its release (downloaded into the module cache if needed)."""
    return module_dir(manager.module, manager.version) / inside


def local_config(manager: Manager, health: int, metrics: int, webhook: int, cert_dir: Path,
                 base: dict[str, Any] | None = None) -> dict[str, Any]:
    """The release's config (``base``, e.g. what a Helm release's ConfigMap holds; by default the module's
    :attr:`Manager.config`) with :data:`OUT_OF_CLUSTER` replaced for a process on this machine."""
    source = base if base is not None else yaml.safe_load(module_file(manager, manager.config).read_text())
    config = copy.deepcopy(source)
    config.update({
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics}"},
        "webhook": {"host": "127.0.0.1", "port": webhook},
        "leaderElection": {"leaderElect": False},
        manager.cert_management: {"enable": False},
    })
    if manager is JOBSET:
        config["webhook"]["certDir"] = str(cert_dir)
    return dict(config)


def webhook_configurations(manager: Manager, port: int, ca: Path, namespaces: Sequence[str]) -> list[dict[str, Any]]:
    """The release's webhook configurations pointed at the manager on ``127.0.0.1:port`` (trusting ``ca``), each
    webhook admitting only ``namespaces``; named ``<manager>-<upstream name>``."""
    return webhooks.pointed_at_local(module_file(manager, manager.webhooks).read_text(), manager.name, port, ca,
                                     namespaces)



@dataclass
class Running:
    """One running manager process (see :func:`start`)."""

    manager: Manager
    process: subprocess.Popen[bytes]
    workdir: Path
    log: Path
    webhook_port: int
    config: dict[str, Any]

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM, SIGKILL after ``grace`` seconds; its working directory is removed."""
        processes.stop(self.process, self.workdir, grace)


def start(manager: Manager, kubeconfig: Path, pki: Pki, ports: Sequence[int], timeout: float = 180.0,
          base_config: dict[str, Any] | None = None) -> Running:
    """Start ``manager`` (building it first when not cached) on ``ports`` (health, metrics, webhook) and wait until
    it is ready (``/readyz``: its webhook server listens). ``kubeconfig`` is its identity (an admin's, or a
    ServiceAccount token's to run under a release's RBAC); ``base_config`` its configuration before
    :func:`local_config`'s changes (the module's when ``None``).

    The webhook's certificate is in ``--config``'s ``webhook.certDir`` for JobSet; the Trainer's config has no such
    field, so its process gets ``TMPDIR`` = its working directory, under which controller-runtime v0.24.1 looks by
    default (``pkg/webhook/server.go``: ``os.TempDir()/k8s-webhook-server/serving-certs``). Metrics are served
    over TLS with the certificate controller-runtime makes itself when given none.

    Raises:
        BuildError: the build failed.
        Timeout: not ready in time (the message ends with the log's tail).
        Abort: the process exited (the same).
    """
    binary = build_tool(TRAINER_TOOL)[0] / manager.binary
    health, metrics, webhook = ports
    workdir = Path(tempfile.mkdtemp(prefix=f"{manager.name}-"))
    certs = issue_loopback_serving(pki, workdir / "k8s-webhook-server" / "serving-certs", f"{manager.name}-webhook")
    config = local_config(manager, health, metrics, webhook, certs, base_config)
    (workdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    log = workdir / f"{manager.name}.log"
    with log.open("ab") as out:
        process = subprocess.Popen([str(binary), f"--config={workdir / 'config.yaml'}", f"--kubeconfig={kubeconfig}",
                                    "--zap-log-level=2"],
                                   stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env={**os.environ, "TMPDIR": str(workdir)},
                                   preexec_fn=die_with_parent())  # noqa: PLW1509 (prctl only)
    running = Running(manager, process, workdir, log, webhook, config)

    processes.await_ready(process, log, manager.name, lambda: processes.http_ok(f"http://127.0.0.1:{health}/readyz"),
                          timeout, f"{manager.name}'s manager to be ready", running.stop)
    return running
