"""DistributedJobs through the real Pulumi engine (the built CLI, the YAML language host, the built kubernetes
provider) against the real API server: preview, up, a second up with no changes, destroy; a replacement
by UID; a patch keeping the UID.

The programs register ``render_job``'s objects with the component's options (``testbed/cluster/programs.py``
says what that leaves out and why). Objects are listed with the ``kubernetes`` client, never from the state.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from components.job.bundle import build_bundle
from components.job.render import RenderedJob, render_job
from testbed.cluster.engine import LOGS_MB, Engine
from testbed.cluster.lifecycle import Cluster
from testbed.cluster.programs import job_resources, write_program
from tests.cluster.kube import live
from tests.components.componenttest import TOKEN, job_args

pytestmark = pytest.mark.cluster


def rendered(namespace: str, **overrides: Any) -> RenderedJob:
    return render_job("demo", job_args(namespace=namespace, **overrides), TOKEN, build_bundle())


def stack(tmp_path: Path, cluster: Cluster, job: RenderedJob, extra: dict[str, Any] | None = None,
          custom_after: tuple[str, ...] = ()) -> Engine:
    """An engine on a fresh file backend and stack ``test``, its program registering ``job``."""
    engine = Engine(tmp_path / "program", tmp_path / "state", cluster.kubeconfig)
    program(engine, job, extra, custom_after)
    engine.run("stack", "init", "test")
    return engine


def program(engine: Engine, job: RenderedJob, extra: dict[str, Any] | None = None,
            custom_after: tuple[str, ...] = ()) -> None:
    write_program(engine.project, "engine-test", {**(extra or {}), **job_resources("demo", job, custom_after)})


def uid(api: client.ApiClient, job: RenderedJob, role: str) -> str:
    body = next(m.body for m in job.manifests if m.role == role)
    found = live(api, body)
    assert found is not None, role
    return str(found["metadata"]["uid"])


def test_preview_up_no_changes_destroy(tmp_path: Path, cluster: Cluster, api: client.ApiClient,
                                       namespace: str) -> None:
    job = rendered(namespace, workers=2)
    engine = stack(tmp_path, cluster, job)
    preview = engine.run("preview", "--diff")
    assert all(m.body["metadata"]["name"] in preview.stdout for m in job.manifests), preview.stdout
    assert all(live(api, m.body) is None for m in job.manifests)  # a preview creates nothing
    engine.run("up", "--yes")
    for manifest in job.manifests:
        assert live(api, manifest.body) is not None, manifest.role
    engine.run("up", "--yes", "--expect-no-changes")
    engine.run("destroy", "--yes")
    assert [m.role for m in job.manifests if live(api, m.body) is not None] == []


def test_an_image_edit_replaces_the_job_once_and_a_ttl_edit_patches_it(
        tmp_path: Path, cluster: Cluster, api: client.ApiClient, namespace: str) -> None:
    job = rendered(namespace, workers=2, ttl_seconds_after_finished=600)
    engine = stack(tmp_path, cluster, job)
    engine.run("up", "--yes")
    first = uid(api, job, "indexed-job")
    patched = rendered(namespace, workers=2, ttl_seconds_after_finished=1200)
    program(engine, patched)
    engine.run("up", "--yes")
    assert uid(api, patched, "indexed-job") == first
    replaced = rendered(namespace, workers=2, ttl_seconds_after_finished=1200, image="python:3.12-slim")
    program(engine, replaced)
    out = engine.run("up", "--yes").stdout
    second = uid(api, replaced, "indexed-job")
    assert second != first
    assert "+-1 replaced" in out, out
    stored = live(api, next(m.body for m in replaced.manifests if m.role == "indexed-job"))
    assert stored is not None
    assert stored["spec"]["template"]["spec"]["containers"][0]["image"] == "python:3.12-slim"
    engine.run("destroy", "--yes")


def test_a_label_edit_patches_a_service_job_in_place(tmp_path: Path, cluster: Cluster, api: client.ApiClient,
                                                     namespace: str) -> None:
    job = rendered(namespace, mode="service", workers=2, labels={"team": "a"})
    engine = stack(tmp_path, cluster, job)
    engine.run("up", "--yes")
    first = uid(api, job, "statefulset")
    relabelled = rendered(namespace, mode="service", workers=2, labels={"team": "b"})
    program(engine, relabelled)
    engine.run("up", "--yes")
    assert uid(api, relabelled, "statefulset") == first
    stored = live(api, next(m.body for m in relabelled.manifests if m.role == "statefulset"))
    assert stored is not None and stored["metadata"]["labels"]["team"] == "b"
    engine.run("destroy", "--yes")


def test_the_engines_own_logs_stay_under_the_cap(tmp_path: Path, cluster: Cluster) -> None:
    """Every CLI command starts a debug log under ``PULUMI_HOME/logs`` and first rotates the directory down to
    ``PULUMI_LOG_ROTATION_MAX_TOTAL_MB`` (github.com/pulumi/pulumi pkg/v3 v3.260.0 ``logging/rotation.go``); the
    tests' cap (``LOGS_MB``) is what keeps a test run's home from growing by hundreds of MB."""
    engine = Engine(tmp_path / "program", tmp_path / "state", cluster.kubeconfig)
    logs = Path(engine.env()["PULUMI_HOME"]) / "logs"
    logs.mkdir(exist_ok=True)
    stamp = (datetime.now() - timedelta(hours=1)).strftime("%Y%m%dT%H%M%S")
    big = logs / f"pulumi-{stamp}-1-preview.log"
    with big.open("wb") as out:
        out.truncate((LOGS_MB + 1) * 1024 * 1024)
    engine.project.mkdir(parents=True)
    engine.run("version")
    assert not big.exists()
    assert sum(f.stat().st_size for f in logs.glob("*.log")) <= LOGS_MB * 1024 * 1024
