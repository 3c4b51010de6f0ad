"""The GitHub workflow cannot run here; check that each of its commands is one the stack supports:
the stack it brings up, the image it builds, the pod and port it forwards, the token it reads, the
client run it makes, the job it waits on, the pods it logs, what it installs."""

from __future__ import annotations

import importlib
import json
import os
import re
import shlex
import subprocess
import sys
from urllib.parse import urlsplit

import pytest
import yaml

from runtime.agent import contract
from runtime.workflow import locate
from tests.components.componenttest import REPO_ROOT, STACKS, run_program, stack_config, stack_file

pytestmark = pytest.mark.process

WORKFLOW = REPO_ROOT / ".github" / "workflows" / "local-stack.yml"
PROGRAM_PACKAGES = ("pulumi", "pulumi-kubernetes", "pulumi-random", "pulumi-eks", "pulumi-aws", "pulumi-command")
CLIENT_PACKAGES = ("httpx",)
"""What the example's driver imports besides the repository (tests/runtime/workflow/test_existing.py
checks that it imports no torch)."""
IMAGE_ROOT = "/app/"
"""Where the image keeps the repository's examples/ (checked against the Dockerfile below)."""


def commands() -> list[list[str]]:
    """Every shell command of the workflow, split into words: one per line, ``&&`` part and pipeline
    stage; leading ``NAME=value`` assignments, output redirections and a trailing ``&`` are dropped."""
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["local-stack"]["steps"]
    lines = [line for step in steps if "run" in step for line in step["run"].splitlines() if line.strip()]
    found = []
    for line in lines:
        for part in line.split("&&"):
            words = shlex.split(part)
            while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
                words = words[1:]
            stage: list[str] = []
            for i, word in enumerate(words):
                if word == "|":
                    found.append(stage)
                    stage = []
                elif word not in ("&", ">", ">>") and (i == 0 or words[i - 1] not in (">", ">>")):
                    stage.append(word)
            found.append(stage)
    return found


def command(*prefix: str) -> list[str]:
    """The one command starting with ``prefix``."""
    (found,) = [c for c in commands() if c[: len(prefix)] == list(prefix)]
    return found


def option(words: list[str], flag: str) -> str:
    return words[words.index(flag) + 1]


def step_run(name_fragment: str) -> str:
    """The ``run`` text of the one step whose name contains ``name_fragment``."""
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["local-stack"]["steps"]
    (found,) = [s["run"] for s in steps if name_fragment in s.get("name", "")]
    return found


@pytest.fixture(scope="module")
def local():
    return run_program(stack_config("local"))


@pytest.fixture(scope="module")
def service(local):
    """The local stack's one service-mode workload: its StatefulSet."""
    (statefulset,) = local.of_type("kubernetes:apps/v1:StatefulSet")
    return statefulset.inputs


@pytest.fixture
def example(monkeypatch):
    """``examples/service_digits.py`` imported as a module (its directory on sys.path, as when run)."""
    monkeypatch.syspath_prepend(str(REPO_ROOT / "examples"))
    return importlib.import_module("service_digits")


def client_run() -> list[str]:
    """The client run: the example script and its arguments."""
    (found,) = [c for c in commands() if any(w.endswith("service_digits.py") for w in c)]
    return found


def test_the_stack_it_brings_up_and_destroys_is_a_tested_stack_file():
    up, destroy = command("pulumi", "up"), command("pulumi", "destroy")

    assert option(up, "--stack") == option(destroy, "--stack") == "local" == command("pulumi", "stack", "select")[-1]
    assert option(command("pulumi", "stack", "output"), "--stack") == "local"
    assert "local" in STACKS


def test_the_image_it_builds_is_the_one_the_stack_loads_and_every_job_runs():
    build = command("docker", "build")
    dockerfile = (REPO_ROOT / option(build, "-f")).read_text()
    config = stack_file("local")
    (batch,) = [j for j in config["trainplane:jobs"] if j.get("mode", "batch") == "batch"]

    assert option(build, "-t") in config["trainplane:kindImages"]
    assert all(job["image"] == option(build, "-t") for job in config["trainplane:jobs"])
    assert f"WORKDIR {IMAGE_ROOT.rstrip('/')}" in dockerfile and "COPY examples/ examples/" in dockerfile
    assert batch["workingDir"] == IMAGE_ROOT.rstrip("/")
    assert (REPO_ROOT / batch["script"]).is_file()


def test_the_service_jobs_processes_can_import_the_functions_the_client_calls(service, example):
    env = {e["name"]: e.get("value") for e in service["spec"]["template"]["spec"]["containers"][0]["env"]}
    in_image = [p.removeprefix(IMAGE_ROOT) for p in env["PYTHONPATH"].split(":") if p.startswith(IMAGE_ROOT)]

    for function in (example.train, example.evaluate):
        module = locate(function).name.split(":")[0]
        assert any((REPO_ROOT / directory / f"{module}.py").is_file() for directory in in_image), module


def test_it_forwards_the_agent_port_of_the_service_jobs_node_0(service):
    forward = command("kubectl", "port-forward")
    local_port, remote_port = map(int, forward[-1].split(":"))
    ports = {p["name"]: p["containerPort"] for p in service["spec"]["template"]["spec"]["containers"][0]["ports"]}

    assert forward[-2] == f"pod/{service['metadata']['name']}-0"
    assert remote_port == ports[contract.AGENT_PORT_NAME] == contract.AGENT_PORT
    assert urlsplit(option(client_run(), "--url")).port == local_port
    assert forward in commands()[: commands().index(client_run())]


def test_the_token_it_reads_is_the_service_jobs_from_an_exported_output_and_masked(local, service, tmp_path):
    output = command("pulumi", "stack", "output")
    (reader,) = [c for c in commands() if c[:2] == ["python", "-c"]]
    tokens = {name: f"token-of-{name}" for name in local.outputs[output[3]]}
    github_env = tmp_path / "github-env"

    assert output[3] in local.secret_outputs and {"--show-secrets", "--json"} <= set(output)
    read = subprocess.run([sys.executable, *reader[1:]], input=json.dumps(tokens), capture_output=True, text=True,
                          check=True, env={**os.environ, "GITHUB_ENV": str(github_env)})
    token = f"token-of-{service['metadata']['name']}"
    assert read.stdout == f"::add-mask::{token}\n"
    assert github_env.read_text() == f"{contract.TOKEN}={token}\n"


def test_the_client_run_is_the_example_attached_to_the_forwarded_job_with_a_threshold(example, monkeypatch):
    run = client_run()
    install = command("python", "-m", "venv")
    monkeypatch.setenv(contract.TOKEN, "from-the-environment")
    args = example.parse_args(run[2:])

    assert run[0] == f"{install[-1]}/bin/python"
    assert (REPO_ROOT / run[1]).is_file()
    assert "PYTHONPATH=. " in step_run("through the client"), "the driver imports runtime from the checkout"
    assert args.url == option(run, "--url") and args.token == "from-the-environment"
    assert args.min_accuracy == 0.9


def test_the_job_it_waits_on_is_the_stacks_batch_job(local):
    wait = command("stacks/wait-for-job.sh")
    (job,) = [r for r in local.of_type("kubernetes:batch/v1:Job")]

    assert (REPO_ROOT / wait[0]).is_file()
    assert job.inputs["metadata"]["name"] == wait[1]
    assert not [c for c in commands() if c[:2] == ["kubectl", "wait"]], "kubectl wait never stops on a failed job"


def test_the_logs_it_shows_select_every_jobs_pods(local):
    selector = option(command("kubectl", "logs"), "-l")
    workloads = local.of_type("kubernetes:batch/v1:Job") + local.of_type("kubernetes:apps/v1:StatefulSet")

    assert selector == contract.LABEL_JOB
    assert len(workloads) == len(stack_file("local")["trainplane:jobs"])
    for workload in workloads:
        labels = workload.inputs["spec"]["template"]["metadata"]["labels"]
        assert labels[selector] == workload.inputs["metadata"]["name"]


def test_the_requirements_it_installs_hold_every_package_the_program_and_the_client_import():
    install = command(".venv/bin/pip", "install")
    names = {
        re.split(r"[<>=\s]", line)[0].lower()
        for line in (REPO_ROOT / option(install, "-r")).read_text().splitlines()
        if line and not line.startswith("#")
    }

    assert set(PROGRAM_PACKAGES) | set(CLIENT_PACKAGES) <= names


def test_the_kind_it_installs_is_pinned():
    env = yaml.safe_load(WORKFLOW.read_text())["jobs"]["local-stack"]["env"]

    assert re.fullmatch(r"v\d+\.\d+\.\d+", env["KIND_VERSION"])
    assert env["PULUMI_CONFIG_PASSPHRASE"] == ""
