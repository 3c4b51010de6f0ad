"""examples/platform: one program, many jobs, run under Pulumi's mocks.

The program makes a namespace, an image repository and a service account, and two jobs from their
outputs; every object of both jobs must be what the same jobs with plain values render, in that namespace,
running that image, and wait for the resources it came from. Given a repository the team has
(``imageRepository``), it creates no ECR repository and the jobs run that repository's image.
"""

from __future__ import annotations

import runpy
from typing import Any

import pulumi
import pytest

from components import DistributedJobArgs
from components.job.bundle import build_bundle
from components.job.render import render_job
from tests.components.componenttest import PASSWORD, REPO_ROOT, Deployment, Mocks, RecordingMonitor, deploy, unsecret
from tests.components.schemacheck import validate_manifest

pytestmark = pytest.mark.unit

PROGRAM = REPO_ROOT / "examples" / "platform" / "__main__.py"
REPOSITORY_URL = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/trainer-images-5f3a2c1"
IMAGE = f"{REPOSITORY_URL}:v7"
SHARED = {"image": IMAGE, "namespace": "research", "service_account": "trainer", "labels": {"team": "research"},
          "working_dir": "/app", "cpus": 1, "memory": "2Gi"}
JOBS = {
    "digits-ddp": DistributedJobArgs(script="examples/ddp_digits.py", args=["--epochs", "10"], workers=2, num_proc=2,
                                     distribution="pytorch", ttl_seconds_after_finished=3600, **SHARED),
    "digits-service": DistributedJobArgs(mode="service", pythonpath=["/app/examples"], workers=2, num_proc=1,
                                         env={"TRAINING_JOB": "digits-ddp"}, **SHARED),
}
"""The two jobs as plain values: what the program's Outputs resolve to."""
SOURCES = ("research", "trainer-images", "trainer")


def run_program(config: dict[str, str]) -> Deployment:
    monitor = RecordingMonitor(Mocks(outputs={"trainer-images": {"repositoryUrl": REPOSITORY_URL}}))

    def program() -> dict[str, Any]:
        root = pulumi.runtime.get_root_resource()
        root.outputs.clear()
        runpy.run_path(str(PROGRAM), run_name="__main__")
        return dict(root.outputs)

    return deploy(program, config=config, monitor=monitor)


@pytest.fixture(scope="module")
def result() -> Deployment:
    return run_program({"trainplane:imageTag": "v7"})


@pytest.mark.parametrize("job", JOBS)
def test_each_job_renders_what_its_plain_values_render(result: Deployment, job: str) -> None:
    component = result.named(job)
    children = result.children(component)
    rendered = render_job(job, JOBS[job], PASSWORD, build_bundle())
    assert set(children) == {f"{job}-{m.role}" for m in rendered.manifests} | {f"{job}-token-value"}
    for manifest in rendered.manifests:
        body = unsecret(children[f"{job}-{manifest.role}"].inputs)
        assert body == manifest.body, f"{job}: {manifest.role} differs"
        assert body["metadata"]["namespace"] == "research"
        validate_manifest(body)


@pytest.mark.parametrize("job", JOBS)
def test_each_job_waits_for_the_resources_it_is_built_from(result: Deployment, job: str) -> None:
    sources = {result.named(name).urn for name in SOURCES}
    for child in result.children(result.named(job)).values():
        assert sources <= set(child.dependencies), f"{child.name} does not wait for {sorted(sources)}"


def test_the_service_job_learns_the_batch_jobs_name_from_its_output(result: Deployment) -> None:
    container = result.named("digits-service-statefulset").inputs["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "TRAINING_JOB", "value": "digits-ddp"} in container["env"]
    assert container["image"] == IMAGE


def test_the_program_exports_where_to_reach_the_service(result: Deployment) -> None:
    assert result.outputs["service_url"] == "http://digits-service-0.digits-service.research.svc.cluster.local:32300"
    assert (result.outputs["namespace"], result.outputs["image"], result.outputs["training_job"]) == (
        "research", IMAGE, "digits-ddp")
    assert "service_token" in result.secret_outputs and result.outputs["service_token"] == PASSWORD


def test_a_repository_the_team_has_replaces_the_ecr_repository() -> None:
    repository = "registry.example.com/research/trainplane-examples"
    result = run_program({"trainplane:imageTag": "v7", "trainplane:imageRepository": repository})
    assert not [r.name for r in result.registrations.values() if r.type.startswith("aws:")]
    for job in JOBS:
        sources = {result.named(name).urn for name in SOURCES if name != "trainer-images"}
        for child in result.children(result.named(job)).values():
            assert sources <= set(child.dependencies), child.name
    container = result.named("digits-service-statefulset").inputs["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == f"{repository}:v7"
    assert result.outputs["image"] == f"{repository}:v7"
