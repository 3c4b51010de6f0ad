"""docs/stacks.md's "An ephemeral cluster on this machine", run as written (``.venv/bin/python`` is this
interpreter; ``TRAINPLANE_CLUSTER_STATE`` keeps it apart from a developer's own cluster)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed.cluster.build import build_all
from tests.conftest import ROOT, processes_with, project_env, wait_until

pytestmark = pytest.mark.cluster

SECTION = "## An ephemeral cluster on this machine"


def block() -> str:
    text = (ROOT / "docs" / "stacks.md").read_text()
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    found = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    assert len(found) == 1
    return str(found[0])


def test_the_docs_commands_deploy_the_existing_stack_and_the_local_stacks_jobs_on_a_cluster_they_start(
        tmp_path: Path) -> None:
    build_all(report=lambda _line: None)
    state = tmp_path / "state"
    script = block().replace(".venv/bin/python", sys.executable)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, capture_output=True, text=True,
                          env=project_env(TRAINPLANE_CLUSTER_STATE=str(state)), timeout=1800, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    created = re.findall(r"(\d+) created", done.stdout)
    deleted = list(re.finditer(r"(\d+) deleted", done.stdout))
    assert len(created) == 2 and created == [m.group(1) for m in deleted], output
    existing, local = done.stdout[:deleted[0].end()], done.stdout[deleted[0].end():]
    assert "left out (needs an add-on this cluster does not run): jobs[0].backend" in done.stderr, output
    assert "trainplane:index:DistributedJob" in existing and "digits" in existing, existing
    jobs = yaml.safe_load((ROOT / "stacks" / "Pulumi.local.yaml").read_text())["config"]["trainplane:jobs"]
    for job in jobs:
        assert f"{job['name']}-token" in local, local
    assert not state.exists()
    assert wait_until(lambda: not processes_with(str(state)), 30)
