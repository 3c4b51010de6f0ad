"""The GitHub workflow cannot run here; check that each of its commands is one the stack supports:
the stack it brings up, the image it builds, the job and pods it waits on, what it installs."""

from __future__ import annotations

import re
import shlex

import pytest
import yaml

from runtime.agent import contract
from tests.components.componenttest import REPO_ROOT, STACKS, run_program, stack_config, stack_file

WORKFLOW = REPO_ROOT / ".github" / "workflows" / "local-stack.yml"
PROGRAM_PACKAGES = ("pulumi", "pulumi-kubernetes", "pulumi-random", "pulumi-eks", "pulumi-aws", "pulumi-command")


def commands() -> list[list[str]]:
    """Every shell command of the workflow, split into words."""
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["local-stack"]["steps"]
    lines = [line for step in steps if "run" in step for line in step["run"].splitlines() if line.strip()]
    return [shlex.split(part) for line in lines for part in line.split("&&")]


def command(*prefix: str) -> list[str]:
    """The one command starting with ``prefix``."""
    (found,) = [c for c in commands() if c[: len(prefix)] == list(prefix)]
    return found


def option(words: list[str], flag: str) -> str:
    return words[words.index(flag) + 1]


@pytest.fixture(scope="module")
def local():
    return run_program(stack_config("local"))


def test_the_stack_it_brings_up_and_destroys_is_a_tested_stack_file():
    up, destroy = command("pulumi", "up"), command("pulumi", "destroy")

    assert option(up, "--stack") == option(destroy, "--stack") == "local" == command("pulumi", "stack", "select")[-1]
    assert "local" in STACKS


def test_the_image_it_builds_is_the_one_the_stack_loads_and_the_job_runs():
    build = command("docker", "build")
    dockerfile = REPO_ROOT / option(build, "-f")
    config = stack_file("local")
    (job,) = config["trainplane:jobs"]

    assert option(build, "-t") in config["trainplane:kindImages"]
    assert option(build, "-t") == job["image"]
    assert f"WORKDIR {job['workingDir']}" in dockerfile.read_text()
    assert "COPY examples/ examples/" in dockerfile.read_text()
    assert (REPO_ROOT / job["script"]).is_file()


def test_the_job_it_waits_on_is_the_stacks_batch_job(local):
    (wait,) = [c for c in commands() if c[:2] == ["kubectl", "wait"]]
    name = wait[-1].removeprefix("job/")
    (job,) = [r for r in local.of_type("kubernetes:batch/v1:Job")]

    assert "--for=condition=complete" in wait
    assert job.inputs["metadata"]["name"] == name


def test_the_logs_it_shows_select_the_jobs_pods(local):
    logs = command("kubectl", "logs")
    key, value = option(logs, "-l").split("=")
    (job,) = local.of_type("kubernetes:batch/v1:Job")

    assert key == contract.LABEL_JOB
    assert job.inputs["spec"]["template"]["metadata"]["labels"][key] == value


def test_the_requirements_it_installs_hold_every_package_the_program_imports():
    install = command(".venv/bin/pip", "install")
    names = {
        re.split(r"[<>=\s]", line)[0].lower()
        for line in (REPO_ROOT / option(install, "-r")).read_text().splitlines()
        if line and not line.startswith("#")
    }

    assert set(PROGRAM_PACKAGES) <= names


def test_the_kind_it_installs_is_pinned():
    env = yaml.safe_load(WORKFLOW.read_text())["jobs"]["local-stack"]["env"]

    assert re.fullmatch(r"v\d+\.\d+\.\d+", env["KIND_VERSION"])
    assert env["PULUMI_CONFIG_PASSPHRASE"] == ""
