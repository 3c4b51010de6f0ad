"""A job keeps its objects when its namespace turns from a string into an Output of the same value (the
README's platform pattern, ``namespace=team.metadata.name``), or back: the plan of that refactor, as
the engine matches URNs and aliases (``tests/components/plan.py``), keeps every resource."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import pulumi
import pulumi_kubernetes as k8s
import pytest

from components.job import DistributedJob
from tests.components.componenttest import Deployment, deploy, job_args
from tests.components.plan import engine_urn, plan

pytestmark = pytest.mark.unit

COMPONENT = "trainplane:index:DistributedJob"


def program(from_output: bool, mode: str) -> Callable[[], dict[str, Any]]:
    def run() -> dict[str, Any]:
        team = k8s.core.v1.Namespace("research", metadata={"name": "research"})
        namespace: pulumi.Input[str] = team.metadata.name if from_output else "research"
        job = DistributedJob("trainer", job_args(mode=mode, namespace=namespace))
        return {"token": job.token, "url": job.coordinator_url}

    return run


def job_resources(deployment: Deployment) -> list[str]:
    """The URNs (the engine's form) of the job's component and everything under it."""
    component = deployment.one(COMPONENT)
    return [engine_urn(component.urn), *(engine_urn(r.urn) for r in deployment.descendants(component))]


def without_aliases(deployment: Deployment) -> Deployment:
    return dataclasses.replace(deployment, registrations={
        urn: dataclasses.replace(reg, aliases=[]) for urn, reg in deployment.registrations.items()})


@pytest.mark.parametrize("mode", ["service", "batch"])
@pytest.mark.parametrize(("before", "after"), [(False, True), (True, False)], ids=["string-to-output",
                                                                                  "output-to-string"])
@pytest.mark.parametrize("preview", [False, True])
def test_turning_the_namespace_into_an_output_replaces_nothing(mode: str, before: bool, after: bool, preview: bool):
    old = deploy(program(before, mode))
    new = deploy(program(after, mode), preview=preview)

    outcome = plan(old, new)

    assert outcome.created == [] and outcome.deleted == [], outcome
    assert len(job_resources(new)) >= 7 and all(u in outcome.kept for u in job_resources(new))
    moved = [u for u in job_resources(new) if outcome.kept[u] != u]
    assert len(moved) == len(job_resources(new)), "every object of the job took its old state through an alias"
    broken = plan(old, without_aliases(new))
    assert len(broken.created) == len(job_resources(new)), "without the aliases each would be made anew"


def test_jobs_of_one_name_in_two_plain_namespaces_still_have_their_own_urns():
    def run() -> dict[str, Any]:
        jobs = [DistributedJob("demo", job_args(namespace=ns)) for ns in ("research", "dev")]
        return {f"url-{i}": job.coordinator_url for i, job in enumerate(jobs)}

    result = deploy(run)
    assert sorted(c.name for c in result.of_type(COMPONENT)) == ["dev/demo", "research/demo"]
