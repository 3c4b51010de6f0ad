"""``testbed/cluster/programs.py`` registers a job's objects as ``DistributedJob`` does: the same type
tokens, names, replacement options and dependencies as the component under Pulumi's mocks, and every
rendered string kept literal in Pulumi YAML."""

from __future__ import annotations

from typing import Any

import pulumi_kubernetes as k8s
import pytest

from components.job import DistributedJob
from components.job.bundle import build_bundle
from components.job.render import render_job
from testbed.cluster.programs import job_resources, literal
from tests.components.componenttest import PASSWORD, deploy, job_args
from tests.components.job.jobrender import BACKENDS

pytestmark = pytest.mark.unit

TOKEN_PASSWORD = "demo-token-value"
"""The component's RandomPassword, which the program leaves out (``programs.py`` says why)."""


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_program_registers_what_the_component_registers(backend: str) -> None:
    overrides = BACKENDS[backend][0]

    def program() -> dict[str, Any]:
        crd = k8s.core.v1.Namespace("crd")
        job = DistributedJob("demo", job_args(**overrides), crd_dependencies=[crd])
        return {"name": job.job_name, "crd": crd.urn}

    result = deploy(program)
    component = next(r for r in result.registrations.values() if r.name == "demo" and not r.custom)
    children = result.children(component)
    resources = job_resources("demo", render_job("demo", job_args(**overrides), PASSWORD, build_bundle()),
                              depends_on=("crd",))
    assert set(resources) == set(children) - {TOKEN_PASSWORD}  # the program's token is a plain secret
    urn_of = {r.urn: r.name for r in result.registrations.values() if r.name not in ("demo", TOKEN_PASSWORD)}
    for name, resource in resources.items():
        child = children[name]
        options = resource.get("options", {})
        if child.type.startswith("kubernetes:kubeflow.org/"):
            # the Python SDK's CustomResource registers as kubernetes:<apiVersion>:<kind>, a type no schema
            # names; Pulumi YAML registers it through the provider's CustomResource type
            assert resource["type"] == "kubernetes:apiextensions.k8s.io:CustomResource", name
            assert child.type == f"kubernetes:{resource['properties']['apiVersion']}:{resource['properties']['kind']}"
        else:
            assert resource["type"] == child.type, name
        assert options.get("replaceOnChanges", []) == child.replace_on_changes, name
        assert options.get("deleteBeforeReplace", False) is child.delete_before_replace, name
        declared = {d.removeprefix("${").removesuffix("}") for d in options.get("dependsOn", [])}
        registered = {urn_of[d] for d in child.dependencies if d in urn_of}
        assert declared == registered, name


def test_strings_stay_literal_except_the_expressions_named() -> None:
    body = {"a": "echo ${HOME}", "b": ["x${y}", 3], "token": "placeholder"}
    assert literal(body, {"placeholder": "${token}"}) == {"a": "echo $${HOME}", "b": ["x$${y}", 3], "token": "${token}"}
