"""The Kubeflow training operator v1, built from its Go module at the add-on's release, run as a process against
the test cluster with the flags the ``TrainingOperator`` add-on renders (issue 21, item 1, the operator).

What comes from where:

- the binary: ``github.com/kubeflow/training-operator/cmd/training-operator.v1`` at ``versions.TRAINING_OPERATOR``
  (``build.PARTS["training-operator"]``, built by ``python -m testbed.cluster build --with training-operator``);
- the flags: the operator container's ``args`` of the release's own Deployment (``manifests/base/deployment.yaml``
  in the module) after the add-on's transform (``with_gang_scheduler``), plus only what running outside a pod
  changes (:func:`command`);
- the CRD: ``kubeflow.org_pytorchjobs.yaml`` from ``crds.schemas_dir()``; the webhook configuration: the release's
  ``manifests/base/webhook/manifests.yaml`` under the name the operator patches (``WEBHOOK_CONFIGURATION``).

Running outside a pod: the operator reads its webhook certificate from ``/tmp/k8s-webhook-server/serving-certs``
(v1.9.4 ``pkg/cert/cert.go``, ``certDir``), where the Deployment mounts the Secret its cert rotator fills; here
the Secret is made beforehand with a certificate for ``127.0.0.1`` too (``pki.rotator_secret``: the rotator keeps
a valid one) and the process sees it at that path through an overlay of ``/tmp`` in a private mount namespace.
The webhooks call ``https://127.0.0.1:<port>`` and admit only the namespaces the caller names.

Out of the release this leaves unexercised: its RBAC (the process runs as the cluster's admin), the Service the
webhooks call, the Deployment's probes and image, the certificate the rotator would make itself, and the other
job kinds (``--enable-scheme=pytorchjob``: their CRDs are not applied; the add-on's release enables all).
"""

from __future__ import annotations

import base64
import copy
import http.client
import os
import ssl
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from components.addons.training_operator import (
    OPERATOR_CONTAINER,
    WEBHOOK_CERT_SECRET,
    WEBHOOK_CONFIGURATION,
    with_gang_scheduler,
)
from testbed.cluster import processes
from testbed.cluster.build import PARTS, build_tool, tool_dir
from testbed.cluster.crds import _download
from testbed.cluster.paths import cache_root
from testbed.cluster.pki import rotator_secret
from testbed.cluster.waiting import die_with_parent, wait_for

(OPERATOR_TOOL,) = PARTS["training-operator"]
NAMESPACE = "kubeflow"
"""The operator's namespace (``MY_POD_NAMESPACE`` unset: ``pkg/cert/cert.go``, ``defaultOperatorNamespace``)."""
CERT_DIR = Path("k8s-webhook-server/serving-certs")
"""Where under ``/tmp`` the operator's webhook server and cert rotator read ``tls.crt`` and ``tls.key``."""
SERVICE_DNS_NAME = f"training-operator.{NAMESPACE}.svc"
"""The name the rotator checks the serving certificate for (``--webhook-service-name`` . namespace . ``svc``)."""
CA_NAME = "training-operator-ca"
"""The rotator's ``CAName`` (``pkg/cert/cert.go``), the name its CA certificate is checked for."""


def module_dir() -> Path:
    """The operator module's directory in the module cache (building the operator first)."""
    build_tool(OPERATOR_TOOL)
    src = tool_dir(OPERATOR_TOOL) / "src"
    return _download(OPERATOR_TOOL.module, OPERATOR_TOOL.version, src, "Dir")


def operator_binary() -> Path:
    """The built operator (building it when not cached).

    Raises:
        BuildError: the build failed.
    """
    return build_tool(OPERATOR_TOOL)[0] / "training-operator"


def rendered_args(gang_scheduler_name: str | None) -> list[str]:
    """The operator container's ``args`` the add-on renders: the release's Deployment through
    ``with_gang_scheduler`` when ``gang_scheduler_name`` is set (the add-on's transform), else as released."""
    deployment = yaml.safe_load((module_dir() / "manifests/base/deployment.yaml").read_text())
    if gang_scheduler_name is not None:
        deployment = with_gang_scheduler(deployment, gang_scheduler_name)
    container = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == OPERATOR_CONTAINER)
    return list(container.get("args", []))


def webhook_configuration(port: int, namespaces: Sequence[str]) -> dict[str, Any]:
    """The release's ValidatingWebhookConfiguration named as the operator patches it, each webhook calling the
    process on ``127.0.0.1:port`` and admitting only ``namespaces``; its ``caBundle`` is the rotator's to set."""
    body = copy.deepcopy(yaml.safe_load((module_dir() / "manifests/base/webhook/manifests.yaml").read_text()))
    body["metadata"] = {"name": WEBHOOK_CONFIGURATION}
    selector = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In",
                                      "values": list(namespaces)}]}
    for hook in body["webhooks"]:
        path = hook["clientConfig"]["service"]["path"]
        hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}"}
        hook["namespaceSelector"] = selector
    return dict(body)


def certificate_secret() -> dict[str, Any]:
    """The Secret the release's ``secretGenerator`` makes (empty there), filled as the rotator keeps it."""
    data = rotator_secret(CA_NAME, SERVICE_DNS_NAME, days=365)
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": WEBHOOK_CERT_SECRET, "namespace": NAMESPACE},
            "type": "Opaque", "data": {k: base64.b64encode(v).decode() for k, v in data.items()}}


def command(args: Sequence[str], kubeconfig: Path, ports: Sequence[int]) -> list[str]:
    """The process's arguments: the rendered ``args``, then what a process beside other tests needs (its
    kubeconfig, its three listeners on loopback ports, no leader election, PyTorchJob only)."""
    health, metrics, webhook = ports
    return [*args, f"--kubeconfig={kubeconfig}", f"--health-probe-bind-address=127.0.0.1:{health}",
            f"--metrics-bind-address=127.0.0.1:{metrics}", f"--webhook-server-port={webhook}",
            "--enable-scheme=pytorchjob", "--leader-elect=false"]



@dataclass
class Operator:
    """One running operator process (see :func:`start`)."""

    process: subprocess.Popen[bytes]
    workdir: Path
    log: Path

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM, SIGKILL after ``grace`` seconds; its overlay goes with the process."""
        processes.stop(self.process, self.workdir, grace)


def start(args: Sequence[str], secret: dict[str, Any], kubeconfig: Path, ports: Sequence[int],
          timeout: float = 180.0) -> Operator:
    """Start the operator with ``args`` (:func:`rendered_args`) and the certificate of ``secret`` (the one
    created in the cluster) and wait until it is ready (``/readyz``: certificates in place, CA injected, webhook
    server listening).

    Raises:
        Timeout: not ready in time (the message ends with the log's tail).
        Abort: the process exited (the same).
    """
    health = ports[0]
    # The overlay's upper and work directories must lie outside the /tmp they cover.
    workdir = Path(tempfile.mkdtemp(prefix="training-operator-", dir=cache_root()))
    upper, work = workdir / "tmp-upper", workdir / "tmp-work"
    certs = upper / CERT_DIR
    certs.mkdir(parents=True)
    work.mkdir()
    for name in ("tls.crt", "tls.key"):
        (certs / name).write_bytes(base64.b64decode(secret["data"][name]))
    mount = f"mount -t overlay overlay -o lowerdir=/tmp,upperdir={upper},workdir={work} /tmp"
    log = workdir / "operator.log"
    with log.open("ab") as out:
        process = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                                    f'{mount} && exec "$@"', "sh", str(operator_binary()),
                                    *command(args, kubeconfig, ports)],
                                   stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env={**os.environ}, preexec_fn=die_with_parent())  # noqa: PLW1509 (prctl only)
    operator = Operator(process, workdir, log)

    processes.await_ready(process, log, "training-operator", lambda: processes.http_ok(f"http://127.0.0.1:{health}/readyz"),
                          timeout, "the training operator to be ready", operator.stop)
    ca = base64.b64decode(secret["data"]["ca.crt"]).decode()
    try:
        wait_for(lambda: webhook_served(ports[2], PYTORCHJOB_WEBHOOK_PATH, ca), timeout,
                 f"the operator to serve {PYTORCHJOB_WEBHOOK_PATH}")
    except BaseException:
        operator.stop()
        raise
    return operator


PYTORCHJOB_WEBHOOK_PATH = "/validate-kubeflow-org-v1-pytorchjob"
"""The PyTorchJob validator's path (the release's ``manifests/base/webhook/manifests.yaml``). The operator's
``/readyz`` turns ready once its webhook server listens, before the PyTorchJob controller's setup registers this
path (``cmd/training-operator.v1/main.go`` sets the controllers up in a goroutine once the certificates are
ready), and until then the server answers 404, which the API server reports as "failed calling webhook ...: the
server could not find the requested resource" for a PyTorchJob created in that window."""


def webhook_served(port: int, path: str, ca: str) -> bool:
    """Whether the operator's webhook server on ``127.0.0.1:port`` (its certificate signed by the PEM ``ca``)
    serves ``path``: any answer but 404 to an empty POST."""
    context = ssl.create_default_context(cadata=ca)
    connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=context)
    try:
        connection.request("POST", path, body=b"{}", headers={"Content-Type": "application/json"})
        return connection.getresponse().status != 404
    finally:
        connection.close()
