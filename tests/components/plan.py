"""What ``pulumi preview`` of a changed program would do to a stack: which resources keep their state
(matched by URN or by an alias), which are created and which deleted, as the engine decides it.

The matching is the engine's, read from pulumi/pulumi ``pkg/resource/deploy/step_generator.go`` (at
1a16857a): ``generateAliases`` collapses each alias spec to a URN (``collapseAliasToUrn``: missing
name, type or parent taken from the resource; a parent that was itself matched through an alias
stands for its old URN; the root stack as parent means none) and adds, for a resource whose parent
was matched through an alias, the parent's alias with the child's name prefix replaced
(``inheritedChildAlias``); ``generateSteps`` then looks the URN up first, each alias after, in the old
state. Resources are taken in registration order, as the engine receives them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tests.components.componenttest import PROJECT, STACK, STACK_TYPE, Deployment, Registration


@dataclass(frozen=True)
class Plan:
    """The outcome of registering ``new`` against the state ``old`` left.

    Attributes:
        kept: new URN -> the old URN whose state it takes (itself when unchanged).
        created: new URNs with no old state (Pulumi would create them).
        deleted: old URNs nothing took (Pulumi would delete them).
    """

    kept: dict[str, str]
    created: list[str]
    deleted: list[str]


def qualified_type(urn: str) -> str:
    """A URN's type chain (``parent$...$type``)."""
    return urn.split("::")[2]


def urn_name(urn: str) -> str:
    return urn.split("::", 3)[3]


def make_urn(type_chain: str, name: str) -> str:
    return f"urn:pulumi:{STACK}::{PROJECT}::{type_chain}::{name}"


def engine_urn(urn: str) -> str:
    """The URN the engine gives what the mock monitor calls ``urn``: the mocks put the root stack's type at
    the head of a top-level resource's type chain, the engine leaves it out (``generateURN``), as
    ``pulumi.create_urn`` does."""
    head, sep, rest = urn.partition(f"::{STACK_TYPE}$")
    return f"{head}::{rest}" if sep else urn


def plan(old: Deployment, new: Deployment) -> Plan:
    """Match ``new``'s registrations with ``old``'s state (module docstring); URNs in the engine's form."""
    olds = {engine_urn(u) for u in old.registrations}
    matched: dict[str, str] = {}  # new URN -> old URN, for parents of later resources
    kept: dict[str, str] = {}
    created: list[str] = []
    for mocked in new.registrations.values():
        reg = dataclasses.replace(mocked, urn=engine_urn(mocked.urn), parent=engine_urn(mocked.parent))
        for candidate in [reg.urn, *aliases(reg, matched)]:
            if candidate in olds:
                kept[reg.urn] = candidate
                if candidate != reg.urn:
                    matched[reg.urn] = candidate
                break
        else:
            created.append(reg.urn)
    return Plan(kept, created, sorted(olds - set(kept.values())))


def aliases(reg: Registration, matched: dict[str, str]) -> list[str]:
    """The URNs the engine would try for ``reg`` after its own (``generateAliases``)."""
    own = [collapse(reg, alias, matched) for alias in reg.aliases]
    parent_alias = matched.get(reg.parent)
    if parent_alias is None:
        return own
    parent_name = urn_name(reg.parent)
    inherited = [inherited_child_alias(reg.type, reg.name, parent_name, parent_alias)]
    inherited += [inherited_child_alias(qualified_type(a).rsplit("$", 1)[-1], urn_name(a), parent_name, parent_alias)
                  for a in own]
    return own + inherited


def collapse(reg: Registration, alias: object, matched: dict[str, str]) -> str:
    """``collapseAliasToUrn``."""
    if alias.urn:  # type: ignore[attr-defined]
        return alias.urn  # type: ignore[attr-defined]
    spec = alias.spec  # type: ignore[attr-defined]
    name, type_ = spec.name or reg.name, spec.type or reg.type
    parent = spec.parentUrn or reg.parent
    if spec.parentUrn:
        parent = matched.get(parent, parent)
    if spec.noParent or not parent or qualified_type(parent) == STACK_TYPE:
        return make_urn(type_, name)
    return make_urn(f"{qualified_type(parent)}${type_}", name)


def inherited_child_alias(child_type: str, child_name: str, parent_name: str, parent_alias: str) -> str:
    """``inheritedChildAlias``: the child named as its parent was, under the parent's old type chain."""
    name = urn_name(parent_alias) + child_name[len(parent_name):] if child_name.startswith(parent_name) \
        else child_name
    return make_urn(f"{qualified_type(parent_alias)}${child_type}", name)
