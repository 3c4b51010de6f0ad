"""The Automation API's failures as a user meets them: what happened, with Pulumi's own details, and the
exact command that fixes it. The exceptions are the SDK's own, chosen by its classifier
(``pulumi.automation.errors.create_command_error``) from CLI output in the CLI's formats: the file
backend's lock message (pulumi/pulumi ``pkg/backend/diy/lock.go``, ``checkForLock``), the passphrase
manager's (``pkg/secrets/passphrase``: ``incorrect passphrase, please set PULUMI_CONFIG_PASSPHRASE ...``)
and an update's diagnostics, which the CLI writes to stdout."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from pulumi import automation as auto
from pulumi.automation.errors import create_command_error

from runtime.workflow import DeployError
from runtime.workflow.pulumi_errors import translated
from runtime.workflow.stacks import PASSPHRASE, AutomationStacks, plugin_versions, workspace_settings

pytestmark = pytest.mark.process

LOCKED = ("error: the stack is currently locked by 1 lock(s). Either wait for the other process(es) to end or "
          "delete the lock file with `pulumi cancel`.\n  {url}: created by alice@{host} (pid {pid}) at "
          "2026-12-01T21:03:04Z")


def stacks_in(tmp_path: Path, **environ: str) -> AutomationStacks:
    return AutomationStacks(workspace_settings(environ={"TRAINPLANE_HOME": str(tmp_path / "home"), **environ}))


def raised(stacks: AutomationStacks, stdout: str, stderr: str, operation: str = "up") -> DeployError:
    error = create_command_error(auto.CommandResult(stdout=stdout, stderr=stderr, code=255))
    with pytest.raises(DeployError) as info, translated("trainer", operation, stacks.where):
        raise error
    assert (info.value.stack, info.value.operation) == ("trainer", operation)
    assert info.value.__cause__ is error
    return info.value


def cancel_line(stacks: AutomationStacks) -> str:
    settings = stacks.settings
    return (f"PULUMI_BACKEND_URL={settings.backend_url} pulumi cancel --yes --cwd {settings.work_dir} "
            f"--stack trainer")


def dead_pid() -> int:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    return gone.pid


@pytest.mark.parametrize("running", [True, False])
def test_a_locked_stack_names_the_lock_its_holder_and_the_cancel_to_run(tmp_path: Path, running: bool):
    stacks = stacks_in(tmp_path)
    lock = f"{stacks.settings.backend_url}/.pulumi/locks/organization/trainplane-compute/trainer/0a1b.json"
    pid = os.getpid() if running else dead_pid()
    stderr = LOCKED.format(url=lock, host=socket.gethostname(), pid=pid)

    error = raised(stacks, "", stderr)

    assert isinstance(error.__cause__, auto.ConcurrentUpdateError), "the SDK's own type"
    state = "still running" if running else "a process no longer running on this host: the lock is stale"
    assert str(error) == (
        f"stack 'trainer' (up): the stack is locked by another Pulumi operation (a second driver of the same job, or "
        f"one that was interrupted): {lock}: taken by alice@{socket.gethostname()} (pid {pid}) at "
        f"2026-12-01T21:03:04Z, {state}. Wait for it to finish; if none is running, remove the lock: "
        f"{cancel_line(stacks)}")


def test_a_lock_taken_elsewhere_and_a_cloud_conflict_keep_pulumis_words(tmp_path: Path):
    stacks = stacks_in(tmp_path)
    elsewhere = raised(stacks, "", LOCKED.format(url="s3://b/lock.json", host="ci-runner-7", pid=12),
                       operation="destroy")
    assert "s3://b/lock.json: taken by alice@ci-runner-7 (pid 12) at 2026-12-01T21:03:04Z. Wait" in str(elsewhere)
    cloud = raised(stacks, "", "error: [409] Conflict: Another update is currently in progress.")
    assert ("(a second driver of the same job, or one that was interrupted): error: [409] Conflict: Another update "
            f"is currently in progress.. Wait for it to finish; if none is running, remove the lock: "
            f"{cancel_line(stacks)}") in str(cloud)


@pytest.mark.parametrize(("environ", "used"), [
    ({}, "the generated one in {home}/passphrase"),
    ({PASSPHRASE: "mine"}, "the one in PULUMI_CONFIG_PASSPHRASE"),
])
def test_a_wrong_passphrase_says_which_one_was_used_and_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  environ: dict[str, str], used: str):
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("PULUMI_CONFIG_PASSPHRASE_FILE", raising=False)
    if not environ:
        monkeypatch.delenv(PASSPHRASE, raising=False)
    stacks = stacks_in(tmp_path, **environ)
    pulumi_said = ("error: failed to decrypt: incorrect passphrase, please set PULUMI_CONFIG_PASSPHRASE to the correct "
                   "passphrase or set PULUMI_CONFIG_PASSPHRASE_FILE to a file containing the passphrase")

    error = raised(stacks, "", pulumi_said)

    settings = stacks.settings
    assert str(error) == (
        f"stack 'trainer' (up): the stack's secrets were encrypted with another passphrase than "
        f"{used.format(home=tmp_path / 'home')}: give the one it was created with in PULUMI_CONFIG_PASSPHRASE or "
        f"PULUMI_CONFIG_PASSPHRASE_FILE; a stack whose passphrase is lost can only be removed from the state: "
        f"PULUMI_BACKEND_URL={settings.backend_url} pulumi stack rm --force --yes --cwd {settings.work_dir} --stack "
        f"trainer (its objects stay in the cluster until you delete them). Pulumi said: {pulumi_said}")


def test_a_missing_plugin_gives_the_install_commands_for_the_versions_the_program_needs(tmp_path: Path):
    stacks = stacks_in(tmp_path)
    versions = plugin_versions()
    pulumi_said = (f"error: could not load plugin for kubernetes provider: no resource plugin "
                   f"'kubernetes-v{versions['kubernetes']}' found in the workspace or on your $PATH, install the "
                   f"plugin using `pulumi plugin install resource kubernetes v{versions['kubernetes']}`")

    error = raised(stacks, "", pulumi_said)

    installs = " && ".join(f"pulumi plugin install resource {n} v{v}" for n, v in sorted(versions.items()))
    assert str(error).startswith(f"stack 'trainer' (up): a provider plugin could not be installed or found; install "
                                 f"them where they can be downloaded: {installs} (or each from a file with --file)")
    assert str(error).endswith(f"Pulumi said: {pulumi_said}")


def test_a_failed_update_quotes_pulumis_diagnostics_from_stdout(tmp_path: Path):
    stdout = ("Updating (trainer):\n + pulumi:pulumi:Stack trainplane-compute-trainer creating\n\n"
              "Diagnostics:\n  kubernetes:apps/v1:StatefulSet (trainer-statefulset):\n"
              "    error: resource research/trainer was not successfully created by the Kubernetes API server: "
              "namespaces \"research\" not found\n\n"
              "Resources:\n    + 3 created\n\nDuration: 2s\n")

    error = raised(stacks_in(tmp_path), stdout, "error: update failed")

    assert str(error) == (
        "stack 'trainer' (up) failed: kubernetes:apps/v1:StatefulSet (trainer-statefulset):\n"
        "    error: resource research/trainer was not successfully created by the Kubernetes API server: namespaces "
        "\"research\" not found\nerror: update failed\nthe stack keeps what was made: fix the cause and run the driver "
        "again, or remove the job with KubernetesCompute(..., name='trainer').destroy()")
