"""The ``trainplane`` Pulumi package: the components any Pulumi language can use, and their schema.

``provider/`` (``PulumiPlugin.yaml`` and ``__main__.py``) is the plugin the Pulumi CLI runs for
``pulumi package add``: it calls :func:`serve`, which hosts :data:`COMPONENTS` with the Python SDK's
component provider host. The SDK infers the package schema from the components' type annotations and
docstrings (their ``args`` TypedDict, their ``Output`` attributes), so the schema cannot drift from the
Python API; :func:`schema` returns the same schema without starting a server.
"""

from __future__ import annotations

import json
from typing import Any

import pulumi
from pulumi.provider.experimental import component_provider_host
from pulumi.provider.experimental.component import ComponentProvider

from components.addons import Kueue, NvidiaDevicePlugin, TrainerV2, TrainingOperator, Volcano
from components.job.component import DistributedJob
from components.tokens import PACKAGE

NAMESPACE = "trainplane"
"""The package's namespace, which the generated SDKs are published under (e.g. ``@trainplane/trainplane``)."""
VERSION = "0.1.0"
"""The package's version, the project's (``pyproject.toml``)."""
COMPONENTS: list[type[pulumi.ComponentResource]] = [
    DistributedJob, NvidiaDevicePlugin, TrainingOperator, Volcano, Kueue, TrainerV2,
]
"""The components the package hosts; each one's type token is ``trainplane:index:<class name>``. The
cluster components are Python only: what they hand the rest of a program is a Kubernetes provider object
for the add-ons and jobs to use, and a program in another language makes its own (pulumi-eks and the
Kubernetes provider are packages there already)."""


def serve() -> None:
    """Serve the package as a Pulumi provider plugin (the Pulumi engine passes its address on the command
    line and reads the port the server prints); returns when the engine stops it."""
    component_provider_host(COMPONENTS, PACKAGE, NAMESPACE, VERSION)


def schema() -> dict[str, Any]:
    """The package schema, as the component provider host serves it (``GetSchema``).

    Raises:
        Exception: the SDK's analyzer cannot infer a schema from a component's annotations (its own
            error types, naming the component and the property).
    """
    return json.loads(ComponentProvider(COMPONENTS, PACKAGE, NAMESPACE, VERSION).schema or "{}")
