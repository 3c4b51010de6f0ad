"""docs/stacks.md and the README's Kubernetes part against what a user with a fresh kind cluster hits:
each command it gives is checked against the stack it runs on, the repository and the Pulumi and
kubectl behaviour it depends on."""

from __future__ import annotations

import fnmatch
import re

import pytest

from tests.components.componenttest import REPO_ROOT, run_program, stack_config, stack_file

pytestmark = pytest.mark.unit

DOCS = (REPO_ROOT / "docs" / "stacks.md").read_text()
README = (REPO_ROOT / "README.md").read_text()


def code_lines(text: str) -> list[str]:
    """Every line inside the text's ```bash blocks, in order."""
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def dockerignored(path: str, patterns: list[str]) -> bool:
    """Docker's .dockerignore rule for one path: patterns in order, the last match wins, ``!`` re-includes,
    a pattern matching a directory covers what is under it, ``**`` matches any number of directories."""
    excluded = False
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for line in patterns:
        negate = line.startswith("!")
        regex = fnmatch.translate(line.lstrip("!").rstrip("/")).replace(".*.*/", "(.*/)?")
        if any(re.match(regex, prefix) for prefix in prefixes):
            excluded = not negate
    return excluded


def test_removing_a_stack_keeps_its_tracked_stack_file():
    """Pulumi CLI ``pulumi stack rm``: "--preserve-config: Do not delete the corresponding
    Pulumi.<stack-name>.yaml configuration file for the stack"; without it the tracked file goes."""
    removals = [line for line in code_lines(DOCS) if line.startswith("pulumi stack rm")]
    assert removals and all("--preserve-config" in line for line in removals)


def test_the_passphrase_and_the_salt_it_writes_are_explained():
    """Pulumi CLI, passphrase secrets provider (the default for ``pulumi login --local``): every command
    that reads secrets asks for the passphrase unless ``PULUMI_CONFIG_PASSPHRASE`` is set, and ``pulumi
    stack init`` writes ``encryptionsalt`` into ``Pulumi.<stack>.yaml``."""
    assert "PULUMI_CONFIG_PASSPHRASE" in DOCS and "encryptionsalt:" in DOCS
    assert not any("encryptionsalt" in str(stack_file(s)) for s in ("local", "aws-gpu", "existing"))


def test_the_port_forward_example_reaches_a_running_service_job_before_calling_it():
    """kubectl ``port-forward`` to a pod that is not Running fails (a batch job's pod finishes in a minute),
    and ``&`` returns before the forward listens: the example targets the service job's node 0, waits for
    it to be Ready and for the forward to answer, then calls it with that job's token."""
    lines = code_lines(DOCS)
    start = next(i for i, line in enumerate(lines) if line.startswith("pulumi stack output coordinatorUrls"))
    block = lines[start: start + 8]
    local = run_program(stack_config("local"))
    (service,) = local.of_type("kubernetes:apps/v1:StatefulSet")
    pod = f"pod/{service.inputs['metadata']['name']}-0"
    forward = next(i for i, line in enumerate(block) if line.startswith("kubectl port-forward"))
    call = next(i for i, line in enumerate(block) if line.startswith("curl -H"))

    assert f"kubectl wait --for=condition=Ready --timeout=5m {pod}" in block[:forward]
    assert block[forward].startswith(f"kubectl port-forward {pod} 32300:32300")
    assert any(line.startswith("until curl -sf http://127.0.0.1:32300/healthz") for line in block[forward:call])
    assert f'["{service.inputs["metadata"]["name"]}"]' in block[1], "the token is the forwarded job's"


def test_the_build_context_holds_only_what_the_image_copies():
    """Docker ``.dockerignore``: the context sent to the builder is the directory minus what it
    excludes; the Dockerfile only ``COPY``s ``examples/``, so a local ``.venv`` must stay out."""
    patterns = [line for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()
                if line and not line.startswith("#")]
    dockerfile = (REPO_ROOT / "stacks" / "images" / "examples.Dockerfile").read_text()
    copied = [line.split()[1] for line in dockerfile.splitlines() if line.startswith("COPY ")]

    assert copied == ["examples/"]
    for path in (".venv", ".venv/lib/python3.11/site-packages/torch/__init__.py", ".git", "checkpoints/x.pt",
                 "logs", "examples/__pycache__/ddp_digits.cpython-311.pyc"):
        assert dockerignored(path, patterns), path
    for path in ("examples/ddp_digits.py", "examples/digits_service_fns.py"):
        assert not dockerignored(path, patterns), path


def test_the_client_install_named_is_the_light_one():
    (client,) = re.findall(r"^client = \[(.*)\]$", (REPO_ROOT / "pyproject.toml").read_text(), flags=re.M)

    assert "pip install '.[client]'" in DOCS
    assert {re.split(r"[<>=]", r.strip(' "'))[0] for r in client.split(",")} == {"httpx", "kubernetes", "pathspec"}


def test_the_readme_builds_the_image_and_creates_the_stack_it_selects():
    lines = code_lines(README)
    build = lines.index("docker build -t trainplane-examples:dev -f stacks/images/examples.Dockerfile .")

    assert lines[build + 1].startswith("pulumi login --local")
    assert lines[build + 3] == "pulumi stack select --create local && pulumi up"
    assert "trainplane-examples:dev" in stack_file("local")["trainplane:kindImages"]


@pytest.mark.parametrize("text", [DOCS, README], ids=["docs/stacks.md", "README.md"])
def test_no_command_waits_for_a_job_with_kubectl_wait(text):
    """``kubectl wait --for=condition=complete job/...`` waits out its whole timeout on a failed job (one
    condition per wait; several ``--for`` are ANDed): the docs follow a batch job with
    ``stacks/wait-for-job.sh``, which stops on either (tests/components/test_wait_for_job.py)."""
    assert not [line for line in code_lines(text) if line.startswith("kubectl wait") and "job/" in line]
    assert text is README or "`stacks/wait-for-job.sh digits`" in text


def test_a_rebuilt_image_is_documented_with_how_pods_pick_it_up():
    assert "kubectl rollout restart statefulset/digits-service" in DOCS
    assert "kubectl delete job/digits && pulumi up --refresh" in DOCS
