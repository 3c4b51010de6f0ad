"""``stacks/wait-for-job.sh``, which the docs and the local-stack workflow use to follow a batch job, run
for real against a stand-in ``kubectl`` that plays a Job's status conditions."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.components.componenttest import REPO_ROOT

pytestmark = pytest.mark.process

SCRIPT = REPO_ROOT / "stacks" / "wait-for-job.sh"
TRUE_TYPES = "{.status.conditions[?(@.status==\"True\")].type}"
FAILED_MESSAGE = "{.status.conditions[?(@.type==\"Failed\")].message}"


def stand_in_kubectl(bin_dir: Path, states: list[str], message: str = "") -> Path:
    """A ``kubectl`` that answers each ``get job/...`` for the conditions with the next of ``states`` (the
    last one from then on), the failure message with ``message``, and logs its arguments."""
    bin_dir.mkdir()
    (bin_dir / "states").write_text("\n".join(states) + "\n")
    kubectl = bin_dir / "kubectl"
    kubectl.write_text(f"""#!/usr/bin/env bash
echo "$*" >> {bin_dir}/calls
case "$*" in
  *'{FAILED_MESSAGE}'*) printf '%s' '{message}'; exit 0 ;;
esac
state=$(head -n 1 {bin_dir}/states)
if [ "$(wc -l < {bin_dir}/states)" -gt 1 ]; then sed -i 1d {bin_dir}/states; fi
printf '%s' "$state"
""")
    kubectl.chmod(0o755)
    return bin_dir


def wait_for(bin_dir: Path, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "WAIT_INTERVAL": "0.05"}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=timeout)


@pytest.mark.parametrize(
    ("states", "code", "said"),
    [
        (["", "", "Complete"], 0, "job/digits completed"),
        (["", "SuccessCriteriaMet Complete"], 0, "job/digits completed"),
        (["", "FailureTarget Failed"], 1, "job/digits failed: Job has reached the specified backoff limit"),
    ],
    ids=["completes", "completes-with-success-criteria", "fails"],
)
def test_it_returns_once_the_job_has_finished_either_way(tmp_path, states, code, said):
    bin_dir = stand_in_kubectl(tmp_path / "bin", states, "Job has reached the specified backoff limit")

    result = wait_for(bin_dir, "digits", "60", "-n", "ml")

    assert result.returncode == code, result.stderr
    assert said in result.stdout + result.stderr
    calls = (bin_dir / "calls").read_text().splitlines()
    assert all(c.startswith("get job/digits -n ml -o jsonpath=") for c in calls)
    assert sum(TRUE_TYPES in c for c in calls) == len(states)


def test_a_job_that_is_still_running_ends_the_wait_at_its_timeout(tmp_path):
    bin_dir = stand_in_kubectl(tmp_path / "bin", ["SuccessCriteriaMet=False"])

    result = wait_for(bin_dir, "digits", "1")

    assert result.returncode == 124
    assert "job/digits is still running after 1s" in result.stderr

