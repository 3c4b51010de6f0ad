"""Type tokens of the components: ``trainplane:index:<class name>``, and aliases from the tokens they had.

The Python SDK's component provider constructs a component from a request for ``<package>:index:<class
name>`` (``pulumi.provider.experimental.component``, ``validate_resource_type``), so a packaged component
registers itself under that token. Those that had another one register with an alias to it: Pulumi then
takes the old state for the new URN instead of replacing the component and its children (children
inherit their parent's aliases).
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

import pulumi

PACKAGE = "trainplane"
"""The Pulumi package of the components (``components.package`` hosts them)."""


def token(class_name: str) -> str:
    """The type token of component ``class_name``."""
    return f"{PACKAGE}:index:{class_name}"


def aliased(opts: Optional[pulumi.ResourceOptions], former: str,
            others: Sequence[pulumi.Input[Union[str, pulumi.Alias]]] = ()) -> pulumi.ResourceOptions:
    """``opts`` plus an alias to the type token ``former`` the component was registered under before, and
    ``others`` (aliases from former names)."""
    return pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(aliases=[pulumi.Alias(type_=former), *others]))
