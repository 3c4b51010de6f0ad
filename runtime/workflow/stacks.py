"""A job's Pulumi stack, through the Automation API: the one narrow interface ``KubernetesCompute`` uses.

:class:`Stacks` is the seam: read a stack's outputs, ``up`` it with an inline program, ``destroy``
it. :class:`AutomationStacks` implements it with ``pulumi.automation`` (which drives the Pulumi
CLI): by default no account is needed, state lives in a local file backend under the user's home
and secrets are encrypted with a passphrase::

    ~/.trainplane/                 (mode 0700; TRAINPLANE_HOME moves it)
        passphrase                 generated on first use, mode 0600, unless PULUMI_CONFIG_PASSPHRASE
                                   or PULUMI_CONFIG_PASSPHRASE_FILE is set (then Pulumi reads that)
        pulumi/state/              the file backend (file://...), one stack per job
        pulumi/workspace/          the workspace: Pulumi.yaml, and Pulumi.<job>.yaml with each stack's
                                   passphrase salt, kept so later runs can decrypt the stack's secrets

Pulumi's errors are translated at this one boundary (:mod:`runtime.workflow.pulumi_errors`) into
:class:`~runtime.workflow.errors.DeployError`, with Pulumi's details and the command that fixes them.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Protocol

from runtime.agent.errors import ConfigError
from runtime.workflow.pulumi_errors import PASSPHRASE, PASSPHRASE_FILE, Where, translated

PROJECT = "trainplane-compute"
"""The Pulumi project of every ``KubernetesCompute`` stack (apart from the repository's own ``trainplane``)."""
HOME_SETTING = "TRAINPLANE_HOME"
"""Environment variable naming the state directory (default ``~/.trainplane``)."""
PASSPHRASE_BYTES = 32
"""Random bytes in a generated passphrase (URL-safe base64 text of about 43 characters)."""
PLUGIN_PACKAGES = ("pulumi_kubernetes", "pulumi_random")
"""The SDK packages the inline program uses; their provider plugins are installed at the same versions."""

Program = Callable[[], None]
"""An inline Pulumi program: registers resources and exports outputs when the engine runs it."""


class Stacks(Protocol):
    """The stacks of jobs, by name: what ``KubernetesCompute`` needs from Pulumi, and all of it."""

    def outputs(self, stack: str) -> Optional[Mapping[str, Any]]:
        """The stack's outputs as plain values (secrets revealed), or ``None`` when no such stack exists.

        Raises:
            DeployError: the backend or the CLI failed.
        """

    def up(self, stack: str, program: Program, refresh: bool = False) -> Mapping[str, Any]:
        """Create the stack if it does not exist, run ``pulumi up`` with ``program``; return its outputs.

        With ``refresh``, ``pulumi up --refresh``: the stack's state is first read back from the
        cluster, so objects deleted outside Pulumi are made again.

        Raises:
            DeployError: the update failed; names the stack and quotes Pulumi's output.
        """

    def destroy(self, stack: str) -> None:
        """``pulumi destroy`` the stack's resources and remove the stack; nothing when it does not exist.

        Raises:
            DeployError: the destroy failed.
        """


def state_dir(environ: Optional[Mapping[str, str]] = None) -> Path:
    """The state directory: ``$TRAINPLANE_HOME``, else ``~/.trainplane``."""
    env = os.environ if environ is None else environ
    return Path(env[HOME_SETTING]).expanduser() if env.get(HOME_SETTING) else Path.home() / ".trainplane"


def private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) if needed; the directory itself is made mode 0700 when created."""
    if not path.is_dir():
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o700)
    return path


def passphrase_file(directory: Path) -> Path:
    """The generated passphrase under ``directory``: created (mode 0600) on first use, else checked.

    Raises:
        ConfigError: the file exists but other users may read it, or it is empty; names the fix.
    """
    path = private_dir(directory) / "passphrase"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        fd = -1
    if fd < 0:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            raise ConfigError(f"{path} is readable by other users (mode {mode:o}): it holds the passphrase of "
                              f"your job stacks' secrets; run chmod 600 {path}")
        if not path.read_text().strip():
            raise ConfigError(f"{path} is empty: remove it only if no stack uses it yet, or put its passphrase back")
        return path
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_urlsafe(PASSPHRASE_BYTES) + "\n")
    return path


def plugin_versions() -> dict[str, str]:
    """Provider plugin name to version, as pinned by the installed SDK packages (their ``pulumi-plugin.json``)."""
    versions = {}
    for package in PLUGIN_PACKAGES:
        meta = json.loads(resources.files(package).joinpath("pulumi-plugin.json").read_text())
        versions[meta["name"]] = meta["version"]
    return versions


@dataclass(frozen=True)
class WorkspaceSettings:
    """Where stacks live and how their secrets are encrypted.

    Attributes:
        backend_url: the Pulumi backend, e.g. ``file:///home/me/.trainplane/pulumi/state``, ``s3://bucket``
            or ``https://api.pulumi.com``.
        secrets_provider: ``passphrase`` or a KMS URL (``awskms://...``, ...), as ``pulumi stack init`` takes it.
        work_dir: the workspace directory (``Pulumi.yaml`` and each stack's settings).
        env: variables for every Pulumi command (the passphrase file, when one is generated).
    """

    backend_url: str
    secrets_provider: str
    work_dir: Path
    env: Mapping[str, str]


def workspace_settings(backend_url: Optional[str] = None, secrets_provider: str = "passphrase",
                       environ: Optional[Mapping[str, str]] = None) -> WorkspaceSettings:
    """The default workspace, or one with another backend or secrets provider.

    Creates the state directory, and the passphrase file when the passphrase provider is used and the
    environment gives no passphrase of its own.

    Raises:
        ConfigError: the passphrase file is unsafe (see :func:`passphrase_file`).
    """
    env = os.environ if environ is None else environ
    home = state_dir(env)
    pulumi_dir = private_dir(private_dir(home) / "pulumi")
    backend = backend_url or (private_dir(pulumi_dir / "state")).as_uri()
    extra: dict[str, str] = {"PULUMI_SKIP_UPDATE_CHECK": "true"}
    if secrets_provider == "passphrase":
        check_passphrase(env)
        if env.get(PASSPHRASE) is None and not env.get(PASSPHRASE_FILE):
            extra[PASSPHRASE_FILE] = str(passphrase_file(home))
    return WorkspaceSettings(backend, secrets_provider, private_dir(pulumi_dir / "workspace"), extra)


def check_passphrase(env: Mapping[str, str]) -> None:
    """Refuse a passphrase that is set but empty: Pulumi would encrypt the job token with nothing.

    Raises:
        ConfigError: ``PULUMI_CONFIG_PASSPHRASE`` is set to an empty string (Pulumi takes it even beside a
            passphrase file), or ``PULUMI_CONFIG_PASSPHRASE_FILE`` (read when the former is unset) names a
            file that cannot be read or is empty; names the fix.
    """
    if env.get(PASSPHRASE) == "":  # Pulumi takes it whenever it is set, even beside a file (os.LookupEnv)
        raise ConfigError(f"{PASSPHRASE} is set but empty: an empty passphrase would encrypt the job token with "
                          f"nothing; set it to your stacks' passphrase, or unset it to use "
                          f"{env[PASSPHRASE_FILE] if env.get(PASSPHRASE_FILE) else state_dir(env) / 'passphrase'}")
    if env.get(PASSPHRASE) is None and env.get(PASSPHRASE_FILE):
        path = Path(env[PASSPHRASE_FILE]).expanduser()
        try:
            empty = not path.read_text().strip()
        except OSError as exc:
            raise ConfigError(f"{PASSPHRASE_FILE}={env[PASSPHRASE_FILE]!r} cannot be read ({exc}): point it at the "
                              f"file holding your stacks' passphrase, or unset it") from exc
        if empty:
            raise ConfigError(f"{PASSPHRASE_FILE}={env[PASSPHRASE_FILE]!r} is an empty file: an empty passphrase "
                              "would encrypt the job token with nothing; put the passphrase in it, or unset it")


def _print_progress(line: str) -> None:
    sys.stderr.write(f"[pulumi] {line.rstrip()}\n")
    sys.stderr.flush()


class AutomationStacks:
    """:class:`Stacks` through ``pulumi.automation`` with an inline program (needs the Pulumi CLI on PATH).

    Args:
        settings: the workspace (default: :func:`workspace_settings`, created on first use).
        project: the Pulumi project name of the stacks.
        on_output: receives Pulumi's progress lines during ``up`` and ``destroy`` (default: printed to
            stderr, prefixed ``[pulumi]``).
    """

    def __init__(self, settings: Optional[WorkspaceSettings] = None, project: str = PROJECT,
                 on_output: Callable[[str], None] = _print_progress) -> None:
        self._settings = settings
        self.project = project
        self.on_output = on_output

    @property
    def settings(self) -> WorkspaceSettings:
        """The workspace settings (the default ones are made on first use)."""
        if self._settings is None:
            self._settings = workspace_settings()
        return self._settings

    def where(self) -> Where:
        """Where this workspace's stacks live and how their passphrase is given (for error messages)."""
        settings = self.settings
        given = settings.env.get(PASSPHRASE_FILE) or os.environ.get(PASSPHRASE_FILE)
        if settings.secrets_provider != "passphrase":
            passphrase = f"the secrets provider {settings.secrets_provider}"
        elif PASSPHRASE_FILE in settings.env:
            passphrase = f"the generated one in {settings.env[PASSPHRASE_FILE]}"
        elif os.environ.get(PASSPHRASE) is not None:
            passphrase = f"the one in {PASSPHRASE}"
        else:
            passphrase = f"the one in {given} ({PASSPHRASE_FILE})"
        return Where(settings.backend_url, settings.work_dir, passphrase, plugin_versions())

    def workspace_options(self, program: Program) -> Any:
        """The ``pulumi.automation.LocalWorkspaceOptions`` of every stack: project, backend, secrets, env."""
        from pulumi import automation as auto

        settings = self.settings
        project = auto.ProjectSettings(name=self.project, runtime="python",
                                       backend=auto.ProjectBackend(url=settings.backend_url),
                                       main=str(settings.work_dir))
        return auto.LocalWorkspaceOptions(work_dir=str(settings.work_dir), program=program,
                                          env_vars=dict(settings.env), secrets_provider=settings.secrets_provider,
                                          project_settings=project)

    def outputs(self, stack: str) -> Optional[Mapping[str, Any]]:
        """See :meth:`Stacks.outputs`."""
        from pulumi import automation as auto

        with translated(stack, "outputs", self.where):
            try:
                selected = auto.select_stack(stack, project_name=self.project, program=_no_program,
                                             opts=self.workspace_options(_no_program))
            except auto.StackNotFoundError:
                return None
            return {key: out.value for key, out in selected.outputs().items()}

    def up(self, stack: str, program: Program, refresh: bool = False) -> Mapping[str, Any]:
        """See :meth:`Stacks.up`; installs the provider plugins the program needs first."""
        from pulumi import automation as auto

        with translated(stack, "up", self.where):
            selected = auto.create_or_select_stack(stack, project_name=self.project, program=program,
                                                   opts=self.workspace_options(program))
            for name, version in plugin_versions().items():
                selected.workspace.install_plugin(name, f"v{version}")
            result = selected.up(on_output=self.on_output, color="never", refresh=refresh or None)
            return {key: out.value for key, out in result.outputs.items()}

    def destroy(self, stack: str) -> None:
        """See :meth:`Stacks.destroy`."""
        from pulumi import automation as auto

        with translated(stack, "destroy", self.where):
            try:
                selected = auto.select_stack(stack, project_name=self.project, program=_no_program,
                                             opts=self.workspace_options(_no_program))
            except auto.StackNotFoundError:
                return
            for name, version in plugin_versions().items():
                selected.workspace.install_plugin(name, f"v{version}")
            selected.destroy(on_output=self.on_output, color="never", remove=True)


def _no_program() -> None:
    """The program of a stack only read or destroyed (neither runs it)."""
