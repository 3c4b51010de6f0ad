"""A job keeps its objects when its namespace turns from a string into an Output of the same value (the
README's pattern, ``namespace=team.metadata.name``), or back, through the real engine (issue 28 item 4):
``pulumi up`` of a program whose ``DistributedJob`` names the namespace as a string, then a ``pulumi
preview`` and ``up`` of the same program naming it through a Namespace resource's Output, replace, create and
delete nothing, and the workload's UID in the API is unchanged. The engine matches the component's aliases
(``components/job/naming.py``'s ``former_names``) and the children inherit them
(github.com/pulumi/pulumi pkg/v3 v3.260.0, ``pkg/resource/deploy/step_generator.go``)."""

from __future__ import annotations

import dataclasses
import json
import textwrap
from pathlib import Path

import pytest
from kubernetes import client

from testbed.cluster.engine import Engine
from testbed.cluster.lifecycle import Cluster
from testbed.cluster.project import cluster_stack, copy_project

pytestmark = pytest.mark.cluster

PROGRAM = textwrap.dedent('''
    import os

    import pulumi
    import pulumi_kubernetes as k8s

    from components.job import DistributedJob, DistributedJobArgs

    provider = k8s.Provider("cluster", kubeconfig=open(os.environ["KUBECONFIG"]).read())
    team = k8s.core.v1.Namespace("team", metadata={"name": "{namespace}"},
                                 opts=pulumi.ResourceOptions(provider=provider))
    namespace = team.metadata.name if os.environ.get("NAMESPACE_FROM_OUTPUT") == "1" else "{namespace}"
    job = DistributedJob("trainer", DistributedJobArgs(image="python:3.11-slim", workers=2, num_proc=1,
                                                       script="train.py", namespace=namespace),
                         opts=pulumi.ResourceOptions(provider=provider, depends_on=[team]))
    pulumi.export("token", job.token)
''')


def steps(engine: Engine, *args: str) -> dict[str, int]:
    """The operations a ``pulumi preview --json`` plans, counted by kind (``same`` left out)."""
    plan = json.loads(engine.run("preview", "--json", *args).stdout)
    return {op: n for op, n in plan.get("changeSummary", {}).items() if op != "same"}


@pytest.mark.parametrize("order", ["string-to-output", "output-to-string"])
def test_a_namespace_turned_into_an_output_replaces_nothing_through_the_engine(
        order: str, tmp_path: Path, cluster: Cluster, api: client.ApiClient) -> None:
    namespace = f"team-{order.split('-', maxsplit=1)[0]}"
    project = copy_project(tmp_path / "project", "dev", cluster_stack("existing", cluster.kubeconfig).config)
    (project / "__main__.py").write_text(PROGRAM.replace("{namespace}", namespace))
    first, then = ("0", "1") if order == "string-to-output" else ("1", "0")
    engine = Engine(project, tmp_path / "state", cluster.kubeconfig, {"NAMESPACE_FROM_OUTPUT": first})
    engine.run("stack", "init", "dev")
    try:
        engine.run("up", "--yes", timeout=1200)
        jobs = client.BatchV1Api(api).list_namespaced_job(namespace).items
        assert [j.metadata.name for j in jobs] == ["trainer"]
        uid = jobs[0].metadata.uid
        token = engine.run("stack", "output", "token", "--show-secrets").stdout

        engine = dataclasses.replace(engine, extra_env={"NAMESPACE_FROM_OUTPUT": then})
        assert steps(engine) == {}, "the refactor plans no create, delete or replace"
        engine.run("up", "--yes", "--expect-no-changes", timeout=1200)
        assert [j.metadata.uid for j in client.BatchV1Api(api).list_namespaced_job(namespace).items] == [uid]
        assert engine.run("stack", "output", "token", "--show-secrets").stdout == token
    finally:
        engine.run("destroy", "--yes", timeout=1200, check=False)
