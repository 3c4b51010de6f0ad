"""Pulumi Inputs inside component arguments: find the unresolved ones, validate them when they resolve,
and compute with them without caring which are known.

A component argument that takes a ``pulumi.Input`` holds either a plain value, checked at once, or a
value whose parts are not known yet (a ``pulumi.Output`` or another awaitable, at any depth of its lists
and mappings). :func:`checked` turns the latter into one ``Output`` of the whole plain value that runs
the same check when Pulumi knows the value: at preview for values known then (a config value, a
``Namespace`` given its name), at update for the rest. A value unknown at preview is not checked then and
fails nothing; the objects rendered from it wait on the check, so an invalid value never reaches the
cluster. :func:`lift` computes with plain values and Outputs alike.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, Callable, TypeVar, Union

import pulumi

T = TypeVar("T")
Labels = Union[Mapping[str, str], "pulumi.Output[Mapping[str, str]]"]
"""Labels as the builders pass them on: a mapping, or an Output of one when the user's labels are an Output."""


def unresolved(value: Any) -> bool:
    """Whether ``value`` is, or holds in its lists, tuples and mappings (keys included), a ``pulumi.Output``
    or another awaitable."""
    if isinstance(value, pulumi.Output) or inspect.isawaitable(value):
        return True
    if isinstance(value, Mapping):
        return any(unresolved(k) or unresolved(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(unresolved(v) for v in value)
    return False


def checked(value: Any, check: Callable[[Any], T]) -> pulumi.Output[T]:
    """One Output of ``value`` with every nested Input resolved, passed through ``check`` when known.

    Args:
        value: an unresolved argument (see :func:`unresolved`).
        check: validates the plain value and returns it as the component keeps it (e.g. frozen); raises
            the component's error, naming the field, for an invalid one.

    Returns:
        An Output that resolves to ``check(plain value)``; when ``check`` raises, so does every resource
        input built from it, and Pulumi registers none of those resources.
    """
    return pulumi.Output.from_input(_plain_containers(value)).apply(check)


def lift(fn: Callable[..., T], *values: Any) -> Any:
    """``fn(*values)`` when every value is plain, else an Output of ``fn`` applied to their resolved values.

    Args:
        fn: a pure function of plain values.
        values: plain values or Outputs (as :func:`checked` makes them).

    Returns:
        ``fn``'s result, or an ``Output`` of it.
    """
    if not any(isinstance(v, pulumi.Output) for v in values):
        return fn(*values)
    return pulumi.Output.all(*values).apply(lambda resolved: fn(*resolved))


def merged(*mappings: Any) -> Any:
    """One dict of every key of ``mappings`` (plain mappings or Outputs of mappings), later ones winning;
    an Output when any of them is one."""
    return lift(lambda *plain: {k: v for m in plain for k, v in m.items()}, *mappings)


def _plain_containers(value: Any) -> Any:
    """``value`` with read-only mappings as dicts and tuples as lists, which ``Output.from_input`` looks into."""
    if isinstance(value, Mapping):
        return {k: _plain_containers(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain_containers(v) for v in value]
    return value
