"""The real Pulumi CLI, as the tests run it: the built binaries, a test-only ``PULUMI_HOME`` holding the built
plugins, a local file backend and a passphrase, and no plugin ever downloaded.

``PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true``: the engine then never installs a plugin, so a run never
reaches for the network (github.com/pulumi/pulumi pkg/v3 v3.260.0). The Python host names a plugin for every
provider SDK in the venv, aws, eks and command among them, which are not built here; before a run the engine's
install of those is best effort (``engine/update.go``, ``newUpdateSource``: "If we can't install missing plugins,
just proceed"; ``engine/plugins.go``, ``ensurePluginsAreInstalled``, records "plugin NAME VERSION not installed"
and goes on), and a plugin is needed only when a resource of its package is registered
(``resource/deploy/providers/registry.go``, ``loadProvider``: the missing-plugin error, no install). So the
programs the tests run, which register only kubernetes and random resources, run without them, and one that
registered an aws resource would fail naming the plugin.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Optional

from testbed.cluster import versions
from testbed.cluster.build import binary
from testbed.cluster.paths import cache_root

PASSPHRASE = "trainplane-test-passphrase"  # noqa: S105 (test stacks' throwaway state)
"""The secrets passphrase of every test stack (the state is thrown away with the test)."""


LOGS_MB = 32
"""The cap on the CLI's own debug logs in a test home, in MB (the engine keeps every command's log under
``PULUMI_HOME/logs`` and rotates at 500 MB by default, ``PULUMI_LOG_ROTATION_MAX_TOTAL_MB``: github.com/pulumi/pulumi
pkg/v3 v3.260.0 ``logging/rotation.go``; one test run writes about 470 MB)."""


RANDOM_PROVIDER = Path(__file__).resolve().parents[1] / "randomprovider.py"
"""The stand-in for pulumi-random's plugin (its docstring says why and what it leaves out)."""


def random_plugin_version() -> str:
    """The version the venv's ``pulumi-random`` SDK asks the engine for (its ``pulumi-plugin.json``)."""
    return metadata.version("pulumi_random")


def _random_plugin(into: Path) -> Path:
    """A plugin directory: the stand-in provider and ``pulumi-resource-random``, which runs it with this
    interpreter (the venv's, which has the Python SDK it serves through)."""
    into.mkdir(parents=True)
    shutil.copyfile(RANDOM_PROVIDER, into / "randomprovider.py")
    launcher = into / "pulumi-resource-random"
    launcher.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$(dirname "$0")/randomprovider.py" '
                        f'--plugin-version {random_plugin_version()} "$@"\n')
    launcher.chmod(0o755)
    return into


HOME_PREFIX = "pulumi-home-"
"""How every test ``PULUMI_HOME`` under the cache root is named."""

INTERPRETER_LINE = "interpreter "
"""The line of a home's ``.installed`` stamp naming the interpreter its random plugin runs with."""


def home_interpreter(home: Path) -> Optional[Path]:
    """The interpreter a test ``PULUMI_HOME``'s random plugin runs with: its stamp's ``interpreter`` line, else (a
    home stamped before that line) the ``exec`` line of the plugin's launcher; ``None`` while it is being installed
    or removed."""
    try:
        for line in (home / ".installed").read_text().splitlines():
            if line.startswith(INTERPRETER_LINE):
                return Path(line.removeprefix(INTERPRETER_LINE))
        for launcher in home.glob("plugins/resource-random-*/pulumi-resource-random"):
            named = re.search(r'^exec "([^"]+)"', launcher.read_text(), re.MULTILINE)
            if named:
                return Path(named.group(1))
    except OSError:  # not stamped yet, or another run's prune removed it meanwhile
        return None
    return None


def prune_homes(root: Path) -> list[Path]:
    """Remove the test ``PULUMI_HOME`` directories under ``root`` whose interpreter (:func:`home_interpreter`) no
    longer exists (a deleted clone's venv: its plugin could never run again, and each home holds some hundreds of
    MB); the removed directories. A home being installed, or naming a live interpreter, is kept. A cache shared by
    machines or containers that see different file systems would lose homes the other side uses: keep
    ``XDG_CACHE_HOME`` to one of them."""
    removed = []
    for home in sorted(root.glob(f"{HOME_PREFIX}*")):
        interpreter = home_interpreter(home)
        if interpreter is not None and not interpreter.exists():
            shutil.rmtree(home, ignore_errors=True)
            removed.append(home)
    return removed


def pulumi_home() -> Path:
    """A ``PULUMI_HOME`` for tests only, with the built kubernetes plugin and the stand-in random plugin
    installed (once per version of each, of the stand-in's source and of the interpreter running it); making one
    prunes the homes of interpreters that are gone (``prune_homes``).

    Raises:
        BuildError: a binary is not built.
        subprocess.CalledProcessError: ``pulumi plugin install`` failed.
    """
    stand_in = hashlib.sha256(RANDOM_PROVIDER.read_bytes() + sys.executable.encode()).hexdigest()[:12]
    home = cache_root() / (f"{HOME_PREFIX}{versions.PULUMI}-{versions.PULUMI_KUBERNETES_MODULE}"
                           f"-random-{random_plugin_version()}-{stand_in}")
    stamp = home / ".installed"
    if stamp.exists():
        return home
    prune_homes(cache_root())
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    env = {**os.environ, "PULUMI_HOME": str(home), "PULUMI_SKIP_UPDATE_CHECK": "true"}
    plugins = (("kubernetes", versions.PULUMI_KUBERNETES_PLUGIN, binary("pulumi-resource-kubernetes")),
               ("random", random_plugin_version(), _random_plugin(home / "random-stand-in")))
    for name, version, source in plugins:
        subprocess.run([str(binary("pulumi")), "plugin", "install", "resource", name, version, "--file", str(source)],
                       env=env, check=True, capture_output=True, text=True)
    shutil.rmtree(home / "random-stand-in")
    stamp.write_text("".join(f"{name} {version}\n" for name, version, _ in plugins)
                     + f"{INTERPRETER_LINE}{sys.executable}\n")
    return home


@dataclass(frozen=True)
class Engine:
    """Runs ``pulumi`` commands for one project directory against one kubeconfig.

    Args:
        project: the directory holding ``Pulumi.yaml``.
        backend: a directory for the file backend's state.
        kubeconfig: the cluster's kubeconfig (``KUBECONFIG``).
        extra_env: more variables for every command (the program reads them, say).
    """

    project: Path
    backend: Path
    kubeconfig: Path
    extra_env: Mapping[str, str] = field(default_factory=dict)

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment every command runs in: this interpreter's directory first on ``PATH`` (the Python
        language host runs ``python`` from ``PATH``: the venv's, with the program's SDKs), then the built
        CLI and language hosts. ``TMPDIR`` is a directory beside the backend's: each time a kubernetes provider
        with an explicit ``kubeconfig`` is configured, it writes that kubeconfig to a new ``kubeconfig*``
        temporary file for Helm and never removes it (github.com/pulumi/pulumi-kubernetes/provider/v4, the
        version ``versions.PULUMI_KUBERNETES_MODULE`` builds: ``pkg/provider/provider.go`` ``Configure`` calls
        ``writeKubeconfigToFile``, ``pkg/provider/util.go``), hundreds a day in the shared ``/tmp`` before;
        now they go with the test's directory."""
        tools = [binary(b).parent for b in ("pulumi", "pulumi-language-yaml", "pulumi-language-python")]
        path = os.pathsep.join([str(Path(sys.executable).parent), *map(str, tools), os.environ.get("PATH", "")])
        self.backend.mkdir(parents=True, exist_ok=True)
        scratch = self.backend.with_name(self.backend.name + "-tmp")
        scratch.mkdir(exist_ok=True)
        env = {**os.environ, "PATH": path, "PULUMI_HOME": str(pulumi_home()), "TMPDIR": str(scratch),
               "PULUMI_BACKEND_URL": f"file://{self.backend}", "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
               "PULUMI_SKIP_UPDATE_CHECK": "true", "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
               "PULUMI_SKIP_CONFIRMATIONS": "true", "KUBECONFIG": str(self.kubeconfig), "NO_COLOR": "1",
               "PULUMI_LOG_ROTATION_MAX_TOTAL_MB": str(LOGS_MB)}
        env.update(extra or {})
        return env

    def run(self, *args: str, timeout: float = 600.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``pulumi ARGS`` in the project directory, non-interactive; the finished process.

        Raises:
            AssertionError: ``check`` and the command failed (the message has its output).
        """
        done = subprocess.run([str(binary("pulumi")), *args, "--non-interactive"], cwd=self.project,
                              env=self.env(self.extra_env), capture_output=True, text=True, timeout=timeout,
                              check=False)
        if check and done.returncode != 0:
            raise AssertionError(f"pulumi {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        return done
