"""The Pulumi programs of ``examples/`` (``platform/``, ``yaml/``) as a copy the test cluster can deploy.

The copy keeps the repository's layout for what the examples reach by relative path: ``components/`` and
``runtime/`` (examples/platform imports the components from two directories up, the provider's
``__main__.py`` from one), ``provider/`` (examples/yaml's ``packages: trainplane: ../../provider``) and the
two example directories. What differs from the repository, each because of this machine:

- examples/platform's ``Pulumi.yaml`` runtime is plain ``python``: the built language host (sdk/v3 v3.68.0)
  then runs the ``python`` first on ``PATH``, the venv's, instead of ``../../.venv``, which a copy lacks
  (as ``project.copy_project`` does for the repository's program);
- with ``plugin_executable``, the copy's ``provider/`` holds ``pulumi-resource-trainplane``, a launcher that
  runs ``provider/__main__.py`` with this interpreter. The engine runs a package directory's
  ``pulumi-resource-<name>`` as the plugin when it is there, and only otherwise starts the plugin through
  the language host ``PulumiPlugin.yaml`` names (github.com/pulumi/pulumi pkg/v3 v3.260.0,
  ``resource/plugin/plugin.go``, ``execPlugin``). The built Python host cannot start a plugin for this CLI:
  its ``RunPlugin`` runs ``python <req.Program>`` (sdk/v3 v3.68.0, ``python/cmd/pulumi-language-python/
  main.go``), and the v3.260.0 CLI leaves that deprecated field empty, sending the plugin's directory in
  ``req.Info`` instead (pkg/v3 v3.260.0, ``resource/plugin/langruntime_plugin.go``, ``RunPlugin``), so the
  host runs ``python ""`` in the program's directory. The launcher replaces only that hop: the engine, the
  YAML host, the schema the plugin serves and every resource it registers are the real ones.

``pulumi package add ../../provider`` is not run: before it starts the plugin, the CLI has its runtime's
language host install the package's dependencies (pkg/v3 v3.260.0, ``cmd/pulumi/packages/packages.go``,
``packageinstallation.InstallPlugin``), and the built host, which reads the ``virtualenv`` option from its
command line rather than from the request, makes ``provider/`` itself the virtual environment and pip-installs
``requirements.txt`` into it from the package index (sdk/v3 v3.68.0, ``python/cmd/pulumi-language-python/
main.go``, ``InstallDependencies``), which the tests do not reach.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
COPIED = ("components", "runtime", "provider", "examples/platform", "examples/yaml")
PLUGIN_EXECUTABLE = "pulumi-resource-trainplane"


def copy_examples(directory: Path, plugin_executable: bool = False) -> Path:
    """Copy the example programs and what they reach into ``directory``; returns ``directory``.

    Args:
        directory: where the copy goes (created); ``examples/platform`` and ``examples/yaml`` are the
            project directories.
        plugin_executable: add ``provider/pulumi-resource-trainplane`` (the module docstring says why).
    """
    for name in COPIED:
        shutil.copytree(REPO_ROOT / name, directory / name, ignore=shutil.ignore_patterns("__pycache__", "venv"))
    platform = directory / "examples" / "platform" / "Pulumi.yaml"
    project = yaml.safe_load(platform.read_text())
    project["runtime"] = "python"
    platform.write_text(yaml.safe_dump(project, sort_keys=False))
    if plugin_executable:
        launcher = directory / "provider" / PLUGIN_EXECUTABLE
        launcher.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$(dirname "$0")/__main__.py" "$@"\n')
        launcher.chmod(0o755)
    return directory
