"""The Automation API side of KubernetesCompute: the default workspace (file backend under the home
directory, passphrase secrets), the options handed to ``pulumi.automation``, and the translation of
its failures. There is no Pulumi CLI here, so ``up`` is run for real only as far as the CLI's absence."""

from __future__ import annotations

import os
import stat
from importlib.metadata import version
from pathlib import Path

import pytest
from pulumi import automation as auto

from runtime.agent.errors import ConfigError
from runtime.workflow import DeployError, KubernetesCompute, fn
from runtime.workflow.stacks import (
    PASSPHRASE,
    PASSPHRASE_FILE,
    PROJECT,
    AutomationStacks,
    plugin_versions,
    workspace_settings,
)
from testbed import service_fns
from tests.components.componenttest import KUBECONFIG

pytestmark = pytest.mark.process


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_default_workspace_is_a_file_backend_and_a_generated_passphrase_only_the_user_can_read(tmp_path: Path):
    home = tmp_path / "state"

    settings = workspace_settings(environ={"TRAINPLANE_HOME": str(home)})

    assert settings.backend_url == (home / "pulumi" / "state").as_uri()
    assert settings.backend_url.startswith("file:///")
    assert settings.secrets_provider == "passphrase"
    assert settings.work_dir == home / "pulumi" / "workspace"
    passphrase = home / "passphrase"
    assert settings.env[PASSPHRASE_FILE] == str(passphrase)
    assert mode(passphrase) == 0o600 and len(passphrase.read_text().strip()) >= 40
    assert {mode(d) for d in (home, home / "pulumi", home / "pulumi" / "state", settings.work_dir)} == {0o700}

    again = workspace_settings(environ={"TRAINPLANE_HOME": str(home)})
    assert again == settings and passphrase.read_text() == passphrase.read_text(), "one passphrase, kept"


@pytest.mark.parametrize("given", [{PASSPHRASE: "mine"}, {PASSPHRASE_FILE: "passphrase-file"}])
def test_a_passphrase_from_the_environment_is_left_to_pulumi(tmp_path: Path, given: dict[str, str]):
    """Pulumi reads ``PULUMI_CONFIG_PASSPHRASE`` when it is set at all (even empty: ``os.LookupEnv``), else a
    non-empty ``PULUMI_CONFIG_PASSPHRASE_FILE``, whose content it trims (pulumi/pulumi
    ``pkg/secrets/passphrase/manager.go``, ``readPassphrase``): either one is the user's, and no file is made."""
    (tmp_path / "passphrase-file").write_text("the user's\n")
    given = {k: str(tmp_path / v) if k == PASSPHRASE_FILE else v for k, v in given.items()}
    settings = workspace_settings(environ={"TRAINPLANE_HOME": str(tmp_path), **given})
    assert PASSPHRASE_FILE not in settings.env and PASSPHRASE not in settings.env
    assert not (tmp_path / "passphrase").exists()


@pytest.mark.parametrize(("given", "message"), [
    ({PASSPHRASE: ""}, r"^PULUMI_CONFIG_PASSPHRASE is set but empty: an empty passphrase would encrypt the job token "
                       r"with nothing; set it to your stacks' passphrase, or unset it to use .*/passphrase$"),
    ({PASSPHRASE: "", PASSPHRASE_FILE: "passphrase-file"}, r"^PULUMI_CONFIG_PASSPHRASE is set but empty: .* or "
                                                           r"unset it to use .*/passphrase-file$"),
    ({PASSPHRASE_FILE: "empty-file"}, r"^PULUMI_CONFIG_PASSPHRASE_FILE='.*/empty-file' is an empty file"),
    ({PASSPHRASE_FILE: "no-such-file"}, r"^PULUMI_CONFIG_PASSPHRASE_FILE='.*/no-such-file' cannot be read"),
])
def test_an_empty_passphrase_is_refused_not_taken_for_none(tmp_path: Path, given: dict[str, str], message: str):
    (tmp_path / "passphrase-file").write_text("the user's\n")
    (tmp_path / "empty-file").write_text("\n")
    given = {k: str(tmp_path / v) if k == PASSPHRASE_FILE else v for k, v in given.items()}
    with pytest.raises(ConfigError, match=message):
        workspace_settings(environ={"TRAINPLANE_HOME": str(tmp_path / "home"), **given})
    assert not (tmp_path / "home" / "passphrase").exists()


def test_another_backend_and_secrets_provider_need_no_passphrase(tmp_path: Path):
    settings = workspace_settings("s3://bucket/jobs", "awskms://alias/jobs", environ={"TRAINPLANE_HOME": str(tmp_path)})

    assert (settings.backend_url, settings.secrets_provider) == ("s3://bucket/jobs", "awskms://alias/jobs")
    assert not (tmp_path / "passphrase").exists()


def test_a_passphrase_file_others_can_read_is_refused_with_the_fix(tmp_path: Path):
    (tmp_path / "passphrase").write_text("secret\n")
    os.chmod(tmp_path / "passphrase", 0o644)

    with pytest.raises(ConfigError, match=rf"^{tmp_path}/passphrase is readable by other users \(mode 644\).*"
                                          rf"run chmod 600 {tmp_path}/passphrase$"):
        workspace_settings(environ={"TRAINPLANE_HOME": str(tmp_path)})


def test_the_workspace_options_carry_the_project_backend_secrets_and_environment(tmp_path: Path):
    settings = workspace_settings(environ={"TRAINPLANE_HOME": str(tmp_path)})
    stacks = AutomationStacks(settings)

    def program() -> None:
        """A program."""

    options = stacks.workspace_options(program)

    assert isinstance(options, auto.LocalWorkspaceOptions)
    assert options.program is program
    assert options.work_dir == str(settings.work_dir)
    assert options.secrets_provider == "passphrase"
    assert options.env_vars == dict(settings.env)
    project = options.project_settings
    assert (project.name, project.runtime, project.backend.url) == (PROJECT, "python", settings.backend_url)


def test_the_provider_plugins_are_the_versions_the_installed_sdks_pin():
    assert plugin_versions() == {"kubernetes": version("pulumi_kubernetes"), "random": version("pulumi_random")}


def test_without_the_pulumi_cli_deploying_fails_at_once_saying_what_to_install(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setenv("TRAINPLANE_HOME", str(tmp_path / "state"))
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    compute = KubernetesCompute(image="registry.example/trainer:1", name="trainer",
                                kubeconfig=str(tmp_path / "kubeconfig"))

    for attempt in (lambda: fn(service_fns.rank).to(compute), compute.destroy):
        with pytest.raises(DeployError, match=r"KubernetesCompute deploys through the Pulumi Automation API, which "
                                              r"runs the Pulumi CLI, and no `pulumi` is on PATH: install it "
                                              r"\(https://www.pulumi.com/docs/install/") as info:
            attempt()
        assert info.value.stack == "trainer"
    assert not compute.running
