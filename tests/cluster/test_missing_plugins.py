"""A provider SDK in the venv whose plugin is not built here (aws, eks, command) does not stop a program that
registers none of its resources, and stops one that registers one, naming the plugin, without a download
(``testbed/cluster/engine.py`` cites the engine's source for both halves: the up-front install is best effort,
the provider is loaded, and found missing, only when a resource of its package is registered)."""

from __future__ import annotations

import dataclasses
import textwrap
from importlib import metadata
from pathlib import Path

import pytest
from kubernetes import client

from testbed.cluster.engine import Engine
from testbed.cluster.lifecycle import Cluster

pytestmark = pytest.mark.cluster

PROGRAM = textwrap.dedent('''
    import os

    import pulumi
    import pulumi_kubernetes as k8s

    provider = k8s.Provider("cluster", kubeconfig=open(os.environ["KUBECONFIG"]).read())
    k8s.core.v1.ConfigMap("plugins", metadata={"name": "plugins", "namespace": os.environ["NAMESPACE"]},
                          data={"a": "b"}, opts=pulumi.ResourceOptions(provider=provider))
    if os.environ.get("WITH_AWS"):
        import pulumi_aws as aws

        aws.s3.Bucket("bucket")
''')


def test_an_unbuilt_plugin_matters_only_to_a_program_that_registers_its_resource(
        tmp_path: Path, cluster: Cluster, api: client.ApiClient, namespace: str) -> None:
    project = tmp_path / "program"
    project.mkdir()
    (project / "Pulumi.yaml").write_text("name: plugins-test\nruntime: python\n")
    (project / "__main__.py").write_text(PROGRAM)
    engine = Engine(project, tmp_path / "state", cluster.kubeconfig, extra_env={"NAMESPACE": namespace})
    engine.run("stack", "init", "test")
    engine.run("config", "set", "aws:region", "us-east-1")
    engine.run("up", "--yes")
    found = client.CoreV1Api(api).read_namespaced_config_map("plugins", namespace)
    assert found.data == {"a": "b"}
    failed = dataclasses.replace(engine, extra_env={"NAMESPACE": namespace, "WITH_AWS": "1"}).run("preview",
                                                                                                 check=False)
    output = failed.stdout + failed.stderr
    assert failed.returncode != 0, output
    version = metadata.version("pulumi-aws")
    assert f"no resource plugin 'pulumi-resource-aws' found in the workspace at version v{version}" in output, output
    engine.run("destroy", "--yes")
