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


def test_the_docs_commands_start_a_cluster_deploy_the_local_stacks_jobs_and_stop(tmp_path: Path) -> None:
    build_all(report=lambda _line: None)
    state = tmp_path / "state"
    script = block().replace(".venv/bin/python", sys.executable)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, capture_output=True, text=True,
                          env=project_env(TRAINPLANE_CLUSTER_STATE=str(state)), timeout=1800, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    jobs = yaml.safe_load((ROOT / "stacks" / "Pulumi.local.yaml").read_text())["config"]["trainplane:jobs"]
    created = re.search(r"(\d+) created", output)
    deleted = re.search(r"(\d+) deleted", output)
    assert created and deleted and created.group(1) == deleted.group(1), output
    for job in jobs:
        assert f"{job['name']}-token" in output, output
    assert not state.exists()
    assert wait_until(lambda: not processes_with(str(state)), 30)
