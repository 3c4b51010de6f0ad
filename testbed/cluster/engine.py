"""The real Pulumi CLI, as the tests run it: the built binaries, a test-only ``PULUMI_HOME`` holding the built
plugins, a local file backend and a passphrase, and no plugin ever downloaded.

``PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true``: the engine then reports a missing plugin as an error
instead of installing it (github.com/pulumi/pulumi pkg/v3 v3.260.0, ``engine/plugins.go``,
``ensurePluginsAreInstalled``: "plugin NAME VERSION not installed"), so a run never reaches for the
network and a plugin that is not built is named.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from testbed.cluster import versions
from testbed.cluster.build import binary
from testbed.cluster.paths import cache_root

PASSPHRASE = "trainplane-test-passphrase"  # noqa: S105 (test stacks' throwaway state)
"""The secrets passphrase of every test stack (the state is thrown away with the test)."""


def pulumi_home() -> Path:
    """A ``PULUMI_HOME`` for tests only, with the built kubernetes plugin installed (once per version).

    Raises:
        BuildError: a binary is not built.
        subprocess.CalledProcessError: ``pulumi plugin install`` failed.
    """
    home = cache_root() / f"pulumi-home-{versions.PULUMI}-{versions.PULUMI_KUBERNETES_MODULE}"
    stamp = home / ".installed"
    if stamp.exists():
        return home
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    env = {**os.environ, "PULUMI_HOME": str(home), "PULUMI_SKIP_UPDATE_CHECK": "true"}
    subprocess.run([str(binary("pulumi")), "plugin", "install", "resource", "kubernetes",
                    versions.PULUMI_KUBERNETES_PLUGIN, "--file", str(binary("pulumi-resource-kubernetes"))],
                   env=env, check=True, capture_output=True, text=True)
    stamp.write_text("kubernetes " + versions.PULUMI_KUBERNETES_PLUGIN + "\n")
    return home


@dataclass(frozen=True)
class Engine:
    """Runs ``pulumi`` commands for one project directory against one kubeconfig.

    Args:
        project: the directory holding ``Pulumi.yaml``.
        backend: a directory for the file backend's state.
        kubeconfig: the cluster's kubeconfig (``KUBECONFIG``).
    """

    project: Path
    backend: Path
    kubeconfig: Path

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment every command runs in."""
        path = os.pathsep.join([str(binary("pulumi").parent), str(binary("pulumi-language-yaml").parent),
                                os.environ.get("PATH", "")])
        self.backend.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PATH": path, "PULUMI_HOME": str(pulumi_home()),
               "PULUMI_BACKEND_URL": f"file://{self.backend}", "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
               "PULUMI_SKIP_UPDATE_CHECK": "true", "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
               "PULUMI_SKIP_CONFIRMATIONS": "true", "KUBECONFIG": str(self.kubeconfig), "NO_COLOR": "1"}
        env.update(extra or {})
        return env

    def run(self, *args: str, timeout: float = 600.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``pulumi ARGS`` in the project directory, non-interactive; the finished process.

        Raises:
            AssertionError: ``check`` and the command failed (the message has its output).
        """
        done = subprocess.run([str(binary("pulumi")), *args, "--non-interactive"], cwd=self.project, env=self.env(),
                              capture_output=True, text=True, timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise AssertionError(f"pulumi {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        return done
