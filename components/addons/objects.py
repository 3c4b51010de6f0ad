"""Register a rendered custom object (a plain dict) as a Pulumi resource."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s


def custom_resource(
    name: str,
    obj: Mapping[str, Any],
    parent: pulumi.Resource,
    depends_on: Sequence[pulumi.Resource],
    replace_on: Sequence[str] = (),
) -> k8s.apiextensions.CustomResource:
    """Register ``obj`` (with ``apiVersion``, ``kind``, ``metadata`` and ``spec``) under ``parent``.

    Args:
        name: Pulumi name of the resource.
        obj: The object, as returned by a pure builder.
        parent: The add-on component that owns it.
        depends_on: What must exist first: at least the release installing the object's CRD.
        replace_on: Immutable property paths: a change to one replaces the object (deleting it first,
            as its name is fixed) instead of patching it.

    Returns:
        The custom resource.
    """
    return k8s.apiextensions.CustomResource(
        name,
        api_version=obj["apiVersion"],
        kind=obj["kind"],
        metadata=obj["metadata"],
        spec=obj.get("spec"),
        opts=pulumi.ResourceOptions(
            parent=parent,
            depends_on=list(depends_on),
            replace_on_changes=list(replace_on) or None,
            delete_before_replace=bool(replace_on) or None,
        ),
    )
