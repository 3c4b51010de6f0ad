"""A ``backend="trainjob"`` DistributedJob deployed with ``pulumi up`` (the real engine, the Python language host,
``DistributedJob``) trains on the real node (``testbed/cluster/realnode.py``): Kubeflow Trainer v2.3.0's and JobSet
v0.12.0's managers (built from their Go modules, ``testbed/cluster/trainer.py``) turn the TrainJob into a JobSet,
its Job and pods; the kubelet runs the pods, whose agents read the Trainer's ``PET_*``, find each other by JobSet's
pod names (CoreDNS) and train ``examples/ddp_digits.py`` with gloo (issue 24, item 5).

The runtime is the add-on's (``cluster_training_runtime``), created with the API client (``live_trainer.py``'s
``trainer_namespace``). Every pod runs the host's Python and the project's venv, mounted read-only
(``images.host_python_volumes``), and the repository the same way; the script is named by its absolute path
(a TrainJob cannot set the ``node`` container's ``workingDir``: ``components.job.trainjob_rules``).

Run it by path (it needs ``build --with trainer`` and ``--with pods``):
``.venv/bin/python -m pytest -q tests/cluster/live_trainer_real.py``.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from components.addons.trainer_runtime import NODE
from components.addons.versions import TRAINER_API
from testbed.agents import ROOT
from testbed.cluster import images, realnode
from testbed.cluster.engine import Engine
from testbed.cluster.lifecycle import Cluster
from testbed.cluster.project import cluster_stack, copy_project
from testbed.cluster.realnode import RealNode
from testbed.cluster.waiting import wait_for
from tests.cluster import kube
from tests.cluster.live_trainer import jobset, trainer_namespace

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1800)]

WAIT = 600.0
"""Seconds a 2-node x 2-process TrainJob may take from ``pulumi up`` to its end on a busy 2-core machine."""
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
"""The label JobSet puts on its Jobs' pods (kubernetes-sigs/jobset v0.12.0 ``api/jobset/v1alpha2/jobset_types.go``,
``JobSetNameKey``)."""
JOB_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"

PROGRAM = textwrap.dedent('''
    import json
    import os

    import pulumi
    import pulumi_kubernetes as k8s

    from components.job import DistributedJob, DistributedJobArgs

    provider = k8s.Provider("cluster", kubeconfig=open(os.environ["KUBECONFIG"]).read())
    job = DistributedJob(os.environ["JOB_NAME"], DistributedJobArgs(**json.loads(os.environ["JOB_ARGS"])),
                         opts=pulumi.ResourceOptions(provider=provider))
    pulumi.export("job", job.job_name)
''')
"""One DistributedJob, its name and arguments (JSON) from the environment."""


@pytest.fixture(scope="module")
def live(cluster: Cluster, api: client.ApiClient, real_node: RealNode) -> Iterator[str]:
    """The managers, webhooks and runtime of ``trainer_namespace``, beside the running real node."""
    with trainer_namespace(cluster, api) as namespace:
        yield namespace


def trainjob_args(namespace: str, **overrides: Any) -> dict[str, Any]:
    """A ``backend="trainjob"`` job of the host-Python image on the real node, the repository mounted read-only;
    ``overrides`` are DistributedJobArgs fields."""
    volumes, mounts = images.host_python_volumes()
    volumes.append({"name": "repository", "hostPath": {"path": str(ROOT), "type": "Directory"}})
    mounts.append({"name": "repository", "mountPath": str(ROOT), "readOnly": True})
    return {"image": images.PYTHON_IMAGE, "namespace": namespace, "backend": "trainjob", "volumes": volumes,
            "volume_mounts": mounts, "cpus": None, "memory": None, "distribution": "pytorch",
            **realnode.placement(), **overrides}


def up(tmp_path: Path, cluster: Cluster, name: str, args: dict[str, Any]) -> Engine:
    """``pulumi up`` of :data:`PROGRAM` with job ``name`` on a fresh stack of the repository's project."""
    project = copy_project(tmp_path / "project", "dev", cluster_stack("existing", cluster.kubeconfig).config)
    (project / "__main__.py").write_text(PROGRAM)
    engine = Engine(project, tmp_path / "state", cluster.kubeconfig, {"JOB_NAME": name, "JOB_ARGS": json.dumps(args)})
    engine.run("stack", "init", "dev")
    engine.run("up", "--yes", timeout=1200)
    return engine


def finished(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    """The TrainJob's Complete or Failed condition once it has one."""
    found = kube.live(api, {"apiVersion": TRAINER_API, "kind": "TrainJob",
                            "metadata": {"name": name, "namespace": namespace}})
    if found is None:
        return None
    for condition in (found.get("status") or {}).get("conditions") or []:
        if condition["type"] in ("Complete", "Failed") and condition["status"] == "True":
            return dict(condition)
    return None


def logs_by_index(api: client.ApiClient, namespace: str, name: str) -> dict[str, str]:
    """Each pod of JobSet ``name`` -> its ``node`` container's log, by the pod's completion index."""
    core = client.CoreV1Api(api)
    found = core.list_namespaced_pod(namespace, label_selector=f"{JOBSET_NAME_LABEL}={name}").items
    return {p.metadata.labels[JOB_INDEX_LABEL]: core.read_namespaced_pod_log(p.metadata.name, namespace,
                                                                             container=NODE) for p in found}


def test_pulumi_up_of_a_two_node_two_process_trainjob_trains_on_the_real_node(
        tmp_path: Path, cluster: Cluster, api: client.ApiClient, live: str) -> None:
    """kubeflow/trainer v2.3.0 copies the JobSet's ``Completed`` condition into the TrainJob's ``Complete``
    (``pkg/runtime/framework/plugins/jobset/jobset.go``, ``Status``), and names ``PET_NODE_RANK`` the Job's
    completion index (``pkg/runtime/framework/plugins/torch/torch.go``); kubernetes-sigs/jobset v0.12.0 labels each
    pod with its JobSet (``JobSetNameKey``) and completes the JobSet when its Job completes
    (``pkg/controllers/jobset_controller.go``, the default ``successPolicy``: all Jobs). So the TrainJob is
    Complete, its JobSet Completed, and the pod of index 0 (node rank 0, which holds global rank 0) logs the
    held-out accuracy of a world of 4."""
    args = trainjob_args(live, script=str(ROOT / "examples" / "ddp_digits.py"), workers=2, num_proc=2,
                         args=["--epochs", "3", "--checkpoint", "/tmp/ddp_digits.pt"])
    engine = up(tmp_path, cluster, "digits", args)
    try:
        condition = wait_for(lambda: finished(api, live, "digits"), WAIT, "TrainJob digits to finish")
        logs = logs_by_index(api, live, "digits")
        assert condition["type"] == "Complete", (condition, logs)
        made = jobset(api, live, "digits")
        assert made is not None
        assert any(c["type"] == "Completed" and c["status"] == "True" for c in made["status"]["conditions"]), made
        assert sorted(logs) == ["0", "1"], logs
        assert "held-out accuracy" in logs["0"] and "world size 4" in logs["0"], logs
    finally:
        engine.run("destroy", "--yes", timeout=1200, check=False)
