"""A rendered DistributedJob as a Pulumi YAML program, registering its objects as ``DistributedJob`` does.

The component (``components/job/component.py``, ``DistributedJob._create``) registers each manifest of
``render_job`` as the kubernetes provider's resource of that kind, named ``<prefix>-<role>``, with
``replaceOnChanges``/``deleteBeforeReplace`` from the manifest's ``replace_on`` and the workload depending
on every earlier object; custom resources are ``apiextensions.k8s.io:CustomResource``. This module writes
the same registrations as a Pulumi YAML program, so the real engine, the real kubernetes provider and the
real API server handle exactly the job's objects and options. A custom resource's type token differs (the
Python SDK registers ``kubernetes:<apiVersion>:<kind>``, which no schema names; Pulumi YAML takes the
provider's ``CustomResource`` type); the provider creates the same object. What it leaves out is the job token's
``RandomPassword``: the token is a plain value of the program, so these programs need no plugin beyond the
kubernetes provider (the repository's own program, ``test_program.py``, draws it from the stand-in random plugin,
``testbed/randomprovider.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from components.job.render import RenderedJob

_GROUPS = {"v1": "core/v1"}


def resource_type(api_version: str, kind: str, custom: bool) -> str:
    """The kubernetes provider's type token for ``kind`` at ``api_version``.

    ``v1`` is the core group (``kubernetes:core/v1:Secret``); a custom resource is the provider's
    ``CustomResource``, which takes its ``apiVersion`` and ``kind`` as properties.
    """
    if custom:
        return "kubernetes:apiextensions.k8s.io:CustomResource"
    return f"kubernetes:{_GROUPS.get(api_version, api_version)}:{kind}"


def literal(node: Any, expressions: dict[str, str] | None = None) -> Any:
    """``node`` with every string kept literal in Pulumi YAML (``${`` written ``$${``), except strings equal
    to a key of ``expressions``, which become that expression (e.g. a placeholder -> ``${token}``)."""
    if isinstance(node, dict):
        return {k: literal(v, expressions) for k, v in node.items()}
    if isinstance(node, list):
        return [literal(v, expressions) for v in node]
    if isinstance(node, str):
        return (expressions or {}).get(node, node.replace("${", "$${"))
    return node


def job_resources(prefix: str, rendered: RenderedJob, depends_on: tuple[str, ...] = (),
                  expressions: dict[str, str] | None = None) -> dict[str, Any]:
    """The job's resources, keyed by logical name (``<prefix>-<role>``), in creation order.

    Args:
        prefix: the component's resource-name prefix (the job name, or ``namespace-name``).
        rendered: ``render_job``'s result.
        depends_on: logical names every custom resource waits for (a CRD the program also registers).
        expressions: strings of the rendered objects to write as Pulumi YAML expressions instead (``literal``).
    """
    resources: dict[str, Any] = {}
    for manifest in rendered.manifests:
        body = manifest.body
        options: dict[str, Any] = {}
        after = list(resources) if manifest.after_previous else []
        if manifest.custom:
            after += list(depends_on)
        if after:
            options["dependsOn"] = [f"${{{name}}}" for name in after]
        if manifest.replace_on:
            options["replaceOnChanges"] = list(manifest.replace_on)
            options["deleteBeforeReplace"] = True
        properties = literal(dict(body) if manifest.custom else {k: v for k, v in body.items() if k != "kind"},
                             expressions)
        entry: dict[str, Any] = {"type": resource_type(body["apiVersion"], body["kind"], manifest.custom),
                                 "properties": properties}
        if options:
            entry["options"] = options
        resources[f"{prefix}-{manifest.role}"] = entry
    return resources


def write_program(directory: Path, project: str, resources: dict[str, Any],
                  outputs: dict[str, Any] | None = None) -> Path:
    """Write ``Pulumi.yaml`` (runtime ``yaml``) with ``resources`` into ``directory``; returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    program: dict[str, Any] = {"name": project, "runtime": "yaml", "resources": resources}
    if outputs:
        program["outputs"] = outputs
    path = directory / "Pulumi.yaml"
    path.write_text(yaml.safe_dump(program, sort_keys=False))
    return path
