"""The repository's real Pulumi program (``__main__.py``, run by the built Python language host and the venv's
SDKs) deploys the ``existing`` stack against the test cluster: ``preview`` creates nothing, ``up`` creates
every object the program registers (listed with the ``kubernetes`` client, not from Pulumi's state), a
second ``up`` changes nothing, ``destroy`` leaves none of them.

The stack is ``stacks/Pulumi.existing.yaml`` with its add-ons left out (``testbed/cluster/project.py`` says
which and why); the job token comes from the stand-in random plugin (``testbed/randomprovider.py``).

Plugins: with ``PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true`` the engine turns each plugin the language
host names but that is not installed (aws, eks, command: their SDKs are in the venv) into an install error
it only logs before the run ("purely a best-effort thing ... we'll fail later" when a provider is
requested; github.com/pulumi/pulumi pkg/v3 v3.260.0, ``engine/update.go``, ``newUpdateSource``, and
``engine/plugins.go``, ``ensurePluginsAreInstalled``). This stack never asks for those providers, so only
the kubernetes and random plugins are installed, and the run succeeds without the others.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from components.job.bundle import build_bundle
from components.job.component import TOKEN_LENGTH
from components.job.pod import TOKEN_KEY
from components.job.render import render_job
from components.stack.config import parse_jobs
from testbed.cluster.engine import Engine
from testbed.cluster.lifecycle import Cluster
from testbed.cluster.project import cluster_stack, copy_project
from tests.cluster.kube import live

pytestmark = pytest.mark.cluster

STACK = "existing"


def registered(config: dict[str, Any]) -> list[dict[str, Any]]:
    """The Kubernetes objects the program registers for ``config``'s jobs (rendered as the program renders
    them; only the token's value differs, which no name depends on)."""
    bundle = build_bundle()
    return [m.body for job in parse_jobs(config["trainplane:jobs"])
            for m in render_job(job.name, job.args, "unused", bundle).manifests]


def key(body: dict[str, Any]) -> tuple[str, str, str]:
    return body["kind"], body["metadata"].get("namespace") or "", body["metadata"]["name"]


def state_objects(engine: Engine) -> set[tuple[str, str, str]]:
    """(kind, namespace, name) of every Kubernetes object in the stack's state."""
    exported = json.loads(engine.run("stack", "export").stdout)
    return {(r["outputs"]["kind"], r["outputs"]["metadata"].get("namespace") or "", r["outputs"]["metadata"]["name"])
            for r in exported["deployment"].get("resources", [])
            if r["type"].startswith("kubernetes:") and not r["type"].startswith("pulumi:providers:")}


def test_the_existing_stack_previews_deploys_converges_and_destroys(tmp_path: Path, cluster: Cluster,
                                                                    api: client.ApiClient) -> None:
    stack = cluster_stack(STACK, cluster.kubeconfig)
    assert stack.left_out == ("trainplane:addons", "trainplane:kueue", "jobs[0].gangScheduler", "jobs[0].queue",
                              "jobs[0].backend")
    engine = Engine(copy_project(tmp_path / "project", STACK, stack.config), tmp_path / "state", cluster.kubeconfig)
    engine.run("stack", "init", STACK)
    objects = registered(stack.config)
    assert {o["kind"] for o in objects} >= {"Secret", "Service", "Job"}

    preview = engine.run("preview")
    assert "digits" in preview.stdout, preview.stdout
    assert [key(o) for o in objects if live(api, o) is not None] == []

    started = time.monotonic()
    engine.run("up", "--yes", timeout=1200)
    print(f"pulumi up of the {STACK} stack (real program, Python host): {time.monotonic() - started:.0f} s")
    assert [key(o) for o in objects if live(api, o) is None] == []
    assert state_objects(engine) == {key(o) for o in objects}
    tokens = json.loads(engine.run("stack", "output", "tokens", "--show-secrets", "--json").stdout)
    secret = live(api, next(o for o in objects if o["kind"] == "Secret"))
    assert secret is not None
    assert base64.b64decode(secret["data"][TOKEN_KEY]).decode() == tokens["digits"]
    assert len(tokens["digits"]) == TOKEN_LENGTH and tokens["digits"].isalnum()  # special=False

    engine.run("up", "--yes", "--expect-no-changes", timeout=1200)
    assert json.loads(engine.run("stack", "output", "tokens", "--show-secrets", "--json").stdout) == tokens

    installed = json.loads(engine.run("plugin", "ls", "--json").stdout)
    assert sorted(p["name"] for p in installed if p["kind"] == "resource") == ["kubernetes", "random"]

    engine.run("destroy", "--yes", timeout=1200)
    assert [key(o) for o in objects if live(api, o) is not None] == []
