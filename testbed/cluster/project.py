"""The repository's own Pulumi program (``__main__.py``) as a copy the test cluster can deploy a stack of.

The copy holds ``Pulumi.yaml``, ``__main__.py``, ``components/`` and ``runtime/`` (the job bundle reads the
agent from there) and its own ``stacks/Pulumi.<stack>.yaml``, so nothing in the repository changes. Two
things differ from the repository, each because of this machine rather than the program:

- ``Pulumi.yaml``'s runtime is plain ``python``: the built language host (sdk/v3 v3.68.0, ``versions.py``)
  then runs the ``python`` first on ``PATH``, the venv's (``Engine.env``), instead of ``.venv`` in the
  project directory, which a copy does not have;
- ``cluster_stack`` leaves out what needs an address outside this machine or a real pod: the add-ons
  (the Training Operator is a kustomize remote target on GitHub and Kueue an OCI chart on
  registry.k8s.io, which nothing here may fetch; and their admission webhooks would be served by pods,
  which kwok only pretends to run) and, with them, the job fields that name them (a PyTorchJob
  backend, a Kueue gang scheduler or queue). The rest of the stack is the stack's own, and
  ``trainplane:kubeconfig`` points at the test cluster.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
COPIED = ("__main__.py", "components", "runtime")
ADDON_KEYS = ("trainplane:addons", "trainplane:kueue", "trainplane:volcanoQueue",
              "trainplane:trainingOperatorGangScheduler")
"""Stack keys of the add-ons, left out of a test stack."""
ADDON_JOB_FIELDS = ("gangScheduler", "queue")
"""Job fields naming an add-on, left out of a test stack's jobs (and ``backend: pytorchjob``)."""


@dataclass(frozen=True)
class ClusterStack:
    """A stack's config for the test cluster, and what was left out of it.

    Attributes:
        config: the ``config`` mapping of ``Pulumi.<stack>.yaml``.
        left_out: ``key`` or ``jobs[i].field`` of every setting left out.
    """

    config: dict[str, Any]
    left_out: tuple[str, ...]


def cluster_stack(stack: str, kubeconfig: Path) -> ClusterStack:
    """``stacks/Pulumi.<stack>.yaml``'s config pointed at ``kubeconfig``, its add-ons left out.

    Raises:
        FileNotFoundError: no such stack file.
    """
    config = dict(yaml.safe_load((REPO_ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"])
    left_out = [key for key in ADDON_KEYS if config.pop(key, None) is not None]
    jobs = []
    for i, given in enumerate(config.get("trainplane:jobs") or []):
        job = dict(given)
        fields = [f for f in ADDON_JOB_FIELDS if f in job]
        if job.get("backend") == "pytorchjob":
            fields.append("backend")
        for field in fields:
            job.pop(field)
        left_out += [f"jobs[{i}].{f}" for f in fields]
        jobs.append(job)
    if jobs:
        config["trainplane:jobs"] = jobs
    config["trainplane:kubeconfig"] = str(kubeconfig)
    return ClusterStack(config, tuple(left_out))


def addon_stack(stack: str, kubeconfig: Path, copies: dict[str, str]) -> ClusterStack:
    """``stacks/Pulumi.<stack>.yaml``'s config pointed at ``kubeconfig`` with its add-ons installed from the local
    ``copies`` (``trainplane:addonCopies``), and what needs an add-on's controller to answer left out: Kueue's
    queues (``trainplane:kueue``; Kueue's webhooks, ``failurePolicy: Fail``, admit every ResourceFlavor, ClusterQueue
    and LocalQueue) and the jobs (its webhooks admit the Jobs and PyTorchJobs of every namespace but ``kube-system``
    and Kueue's own, the operator's every PyTorchJob), since no pod runs here to serve them.

    Raises:
        FileNotFoundError: no such stack file.
    """
    config = dict(yaml.safe_load((REPO_ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"])
    left_out = tuple(key for key in ("trainplane:kueue", "trainplane:jobs") if config.pop(key, None) is not None)
    config["trainplane:addonCopies"] = dict(copies)
    config["trainplane:kubeconfig"] = str(kubeconfig)
    return ClusterStack(config, left_out)


def whole_stack(stack: str, kubeconfig: Path, copies: dict[str, str]) -> ClusterStack:
    """``stacks/Pulumi.<stack>.yaml``'s config as written, pointed at ``kubeconfig``, its add-ons installed from the
    local ``copies`` (``trainplane:addonCopies``): nothing left out, for a run whose add-ons' controllers answer
    (``tests/cluster/live_existing_stack.py`` runs them as processes).

    Raises:
        FileNotFoundError: no such stack file.
    """
    config = dict(yaml.safe_load((REPO_ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"])
    config["trainplane:addonCopies"] = dict(copies)
    config["trainplane:kubeconfig"] = str(kubeconfig)
    return ClusterStack(config, ())


def copy_project(directory: Path, stack: str, config: dict[str, Any]) -> Path:
    """Copy the program into ``directory`` with ``stacks/Pulumi.<stack>.yaml`` holding ``config``;
    returns ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    project = yaml.safe_load((REPO_ROOT / "Pulumi.yaml").read_text())
    project["runtime"] = "python"
    (directory / "Pulumi.yaml").write_text(yaml.safe_dump(project, sort_keys=False))
    for name in COPIED:
        source = REPO_ROOT / name
        if source.is_dir():
            shutil.copytree(source, directory / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copyfile(source, directory / name)
    write_stack(directory, stack, config)
    return directory


def write_stack(directory: Path, stack: str, config: dict[str, Any]) -> Path:
    """Write ``config`` as the copy in ``directory``'s ``Pulumi.<stack>.yaml`` (where its ``Pulumi.yaml`` keeps
    stack files); returns the file's path."""
    project = yaml.safe_load((directory / "Pulumi.yaml").read_text())
    stacks = directory / project.get("stackConfigDir", ".")
    stacks.mkdir(parents=True, exist_ok=True)
    path = stacks / f"Pulumi.{stack}.yaml"
    path.write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    return path
