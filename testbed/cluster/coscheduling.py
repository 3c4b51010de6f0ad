"""scheduler-plugins' scheduler with its Coscheduling plugin, built from its Go module
(``build.PARTS["scheduler-plugins"]``, ``python -m testbed.cluster build --with scheduler-plugins``), run as a second
scheduler against the test cluster under the name the job components render for (issue 21, gang scheduling).

The profile is the one the release's second-scheduler chart renders from its default values
(sigs.k8s.io/scheduler-plugins v0.34.7 ``manifests/install/charts/as-a-second-scheduler``: ``values.yaml`` and
``templates/configmap.yaml``), read from the module: one profile named ``scheduler.name``
(``scheduler-plugins-scheduler``, ``components.addons.versions.SCHEDULER_PLUGINS_SCHEDULER``) with the chart's
``plugins`` under ``multiPoint`` and its ``pluginConfig`` (Coscheduling's ``permitWaitingTimeSeconds: 10``).
Of the chart's enabled plugins (Coscheduling, CapacityScheduling, NodeResourceTopologyMatch,
NodeResourcesAllocatable) those in :data:`NEEDING_CRDS` are left out: they watch the ElasticQuota and
NodeResourceTopology CRDs, which trainplane never renders and this cluster does not have. The chart's controller
(PodGroup status, ``cmd/controller``), its RBAC and its Deployment are not run: the plugin schedules from the
PodGroup's spec and the pods (v0.34.7 ``pkg/coscheduling/core/core.go``, ``PreFilter``, reads ``minMember`` and
``minResources`` only).

The build: ``k8s.io/csi-translation-lib`` is built at v0.34.5 where the release's go.mod replaces it with v0.34.7,
which the Go module proxy here refuses (``versions.SERVED_INSTEAD``), and the binary reports the Kubernetes release
it is built on (``build.PARTS``). Its cold build took 998 s (16 min 38 s) wall, 289 s user and 52 s system CPU, at
nice 19 beside the default build and another part's (load average 10 to 55), the modules already downloaded; with
the compiled packages in Go's build cache a rebuild links in 33 s.
"""

from __future__ import annotations

import copy
import os
import ssl
import subprocess
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from components.addons.versions import SCHEDULER_PLUGINS_SCHEDULER
from testbed.cluster import processes
from testbed.cluster.build import PARTS, build_tool, tool_dir
from testbed.cluster.crds import _download
from testbed.cluster.waiting import Abort, die_with_parent

(SCHEDULER_TOOL,) = PARTS["scheduler-plugins"]
CHART = Path("manifests/install/charts/as-a-second-scheduler")
NEEDING_CRDS = ("CapacityScheduling", "NodeResourceTopologyMatch")
"""The chart's enabled plugins left out (see the module docstring)."""


def chart_values() -> dict[str, Any]:
    """The second-scheduler chart's default values, from the module (building the scheduler first)."""
    build_tool(SCHEDULER_TOOL)
    module = _download(SCHEDULER_TOOL.module, SCHEDULER_TOOL.version, tool_dir(SCHEDULER_TOOL) / "src", "Dir")
    return dict(yaml.safe_load((module / CHART / "values.yaml").read_text()))


def scheduler_config(values: dict[str, Any], kubeconfig: Path) -> dict[str, Any]:
    """The KubeSchedulerConfiguration the chart's ``configmap.yaml`` renders from ``values`` (less the enabled
    plugins of :data:`NEEDING_CRDS`), reading the cluster through ``kubeconfig``."""
    plugins = values["plugins"]
    profile: dict[str, Any] = {
        "schedulerName": values["scheduler"]["name"],
        "plugins": {"multiPoint": {"enabled": [{"name": p} for p in plugins["enabled"] if p not in NEEDING_CRDS],
                                   "disabled": [{"name": p} for p in plugins["disabled"]]}},
    }
    if values.get("pluginConfig"):
        profile["pluginConfig"] = copy.deepcopy(values["pluginConfig"])
    return {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "leaderElection": {"leaderElect": bool(values["scheduler"]["leaderElect"])},
            "clientConnection": {"kubeconfig": str(kubeconfig)}, "profiles": [profile]}


def _healthy(port: int) -> bool:
    # The scheduler serves /healthz on its own self-signed certificate; the probe only asks whether it answers.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", timeout=5, context=context) as answer:
        return bool(answer.status == 200)


@dataclass
class SecondScheduler:
    """One running scheduler process (see :func:`start`)."""

    process: subprocess.Popen[bytes]
    workdir: Path
    log: Path
    config: dict[str, Any]

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM, SIGKILL after ``grace`` seconds."""
        processes.stop(self.process, self.workdir, grace)


def start(kubeconfig: Path, port: int, timeout: float = 180.0) -> SecondScheduler:
    """Start the scheduler with the chart's profile (:func:`scheduler_config`), serving on ``127.0.0.1:port``, and
    wait until ``/healthz`` answers.

    Raises:
        Timeout: not healthy in time (the message ends with the log's tail).
        Abort: the process exited (the same).
    """
    config = scheduler_config(chart_values(), kubeconfig)
    if config["profiles"][0]["schedulerName"] != SCHEDULER_PLUGINS_SCHEDULER:
        raise Abort(f"the chart names its scheduler {config['profiles'][0]['schedulerName']!r}, the job components "
                    f"{SCHEDULER_PLUGINS_SCHEDULER!r}: correct components/addons/versions.py")
    workdir = Path(tempfile.mkdtemp(prefix="scheduler-plugins-"))
    (workdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    log = workdir / "scheduler.log"
    binary = build_tool(SCHEDULER_TOOL)[0] / "scheduler-plugins-scheduler"
    with log.open("ab") as out:
        process = subprocess.Popen([str(binary), f"--config={workdir / 'config.yaml'}",
                                    f"--authentication-kubeconfig={kubeconfig}",
                                    f"--authorization-kubeconfig={kubeconfig}", "--bind-address=127.0.0.1",
                                    f"--secure-port={port}", f"--cert-dir={workdir / 'certs'}", "--v=2"],
                                   stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env={**os.environ}, preexec_fn=die_with_parent())  # noqa: PLW1509 (prctl only)
    scheduler = SecondScheduler(process, workdir, log, config)

    processes.await_ready(process, log, "the scheduler", lambda: _healthy(port),
                          timeout, "scheduler-plugins' scheduler to be healthy", scheduler.stop)
    return scheduler
