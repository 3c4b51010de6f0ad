"""A stack's jobs as a Pulumi YAML program for the test cluster: ``python -m testbed.cluster program STACK DIR``.

It reads ``stacks/Pulumi.<STACK>.yaml``'s ``trainplane:jobs`` with the stack program's own parser
(``components/stack/config.py``), renders every job with ``render_job`` and writes the registrations
``DistributedJob`` makes (``programs.py``), plus the CRD of every custom resource kind they use (PyTorchJob:
its CRD from ``crds.crd_file``, which the Kubeflow add-on installs on a real cluster). The job token is made
here (``secrets.token_urlsafe``) and written into the program as a Pulumi secret.
"""

from __future__ import annotations

import dataclasses
import secrets
import sys
from pathlib import Path
from typing import Any

import yaml

from components.job.bundle import build_bundle
from components.job.naming import resource_name
from components.job.render import render_job
from components.stack.config import parse_jobs
from testbed.cluster import crds
from testbed.cluster.programs import job_resources, literal, write_program

REPO_ROOT = Path(__file__).resolve().parents[2]
CRD_OF_KIND: dict[tuple[str, str], str] = {}
"""The CRD file of each custom resource kind the program can register: none, since Pulumi YAML (pulumi-yaml
v1.25.0) refuses ``kubernetes:apiextensions.k8s.io:CustomResource`` and has no schema for a CRD's own type
token, so a job rendering a PyTorchJob, PodGroup or queue is refused by name."""


class StackJobsError(ValueError):
    """The stack has no jobs, or a job renders a custom resource whose CRD the test cluster cannot serve."""


def crd_resource(file: str) -> dict[str, Any]:
    """A ``CustomResourceDefinition`` resource of the program, from ``crds.crd_file(file)``."""
    crd = yaml.safe_load(crds.crd_file(file).read_text())
    return {"type": "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition",
            "properties": literal({k: v for k, v in crd.items() if k not in ("kind", "status")})}


def stack_jobs_program(stack: str, directory: Path, skip_custom: bool = False) -> Path:
    """Write the program of stack ``stack``'s jobs into ``directory``; returns its ``Pulumi.yaml``.

    With ``skip_custom``, custom resources (a PodGroup, a PyTorchJob) are left out instead of refused, and
    each left out is named on stderr.

    Raises:
        FileNotFoundError: no ``stacks/Pulumi.<stack>.yaml``.
        StackConfigError: its jobs are invalid (the stack program's own message).
        StackJobsError: it has no jobs, or one needs a CRD the test cluster lacks (named).
    """
    config = yaml.safe_load((REPO_ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"]
    jobs = parse_jobs(config.get("trainplane:jobs") or [])
    if not jobs:
        raise StackJobsError(f"stacks/Pulumi.{stack}.yaml has no trainplane:jobs")
    bundle = build_bundle()
    resources: dict[str, Any] = {}
    token = "trainplane-token-placeholder"  # noqa: S105 (replaced by the ${token} secret below)
    for job in jobs:
        rendered = render_job(job.name, job.args, token, bundle)
        if skip_custom:
            for manifest in rendered.manifests:
                if manifest.custom:
                    print(f"left out: {job.name}'s {manifest.body['kind']} ({manifest.body['apiVersion']})",
                          file=sys.stderr)
            rendered = dataclasses.replace(rendered, manifests=tuple(m for m in rendered.manifests if not m.custom))
        needed: list[str] = []
        for manifest in rendered.manifests:
            if not manifest.custom:
                continue
            key = (manifest.body["apiVersion"], manifest.body["kind"])
            if key not in CRD_OF_KIND:
                raise StackJobsError(f"job {job.name!r} renders a {key[1]} ({key[0]}), which a Pulumi YAML program "
                                     f"cannot register; take a stack whose jobs render built-in kinds only (local)")
            name = f"crd-{CRD_OF_KIND[key].split('_', 1)[1].removesuffix('.yaml')}"
            resources.setdefault(name, crd_resource(CRD_OF_KIND[key]))
            needed.append(name)
        resources.update(job_resources(resource_name(job.name, job.args.namespace).replace("/", "-"), rendered,
                                       tuple(dict.fromkeys(needed)), {token: "${token}"}))
    program = write_program(directory, f"trainplane-{stack}-jobs", resources)
    document = yaml.safe_load(program.read_text())
    document["variables"] = {"token": {"fn::secret": secrets.token_urlsafe(24)}}
    program.write_text(yaml.safe_dump(document, sort_keys=False))
    return program
