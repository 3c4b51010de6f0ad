"""A component's arguments from a mapping: how a Pulumi program in another language passes them.

The Python SDK's component provider hands a component the inputs of a ``Construct`` request as a dict
of Python field names, nested objects as dicts too, and every number as a float
(``google.protobuf.Value``; pulumi 3.272.0 ``pulumi/provider/experimental/component.py``,
``map_input_properties``, keeps the float). :func:`args_from` turns that, or an args dataclass, or
nothing, into the component's validated args dataclass.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Callable, TypeVar

import pulumi

from components.errors import ArgumentError

T = TypeVar("T")
_PULUMI_NAMES = {"Output": pulumi.Output, "T": T}
"""What ``pulumi.Input``'s forward reference ``"Output[T]"`` names, to resolve annotations holding it."""
Fail = Callable[[str, Any, str, str], Exception]
"""Makes the component's error from (field, value, what is wrong, the fix)."""


def args_from(cls: type[T], given: Any, fail: Fail = ArgumentError.of) -> T:
    """``given`` as the args dataclass ``cls``: an instance as is, ``None`` as the defaults, a mapping of
    field names to values built field by field (see :func:`from_mapping`).

    Raises:
        Exception: what ``fail`` makes, or the dataclass raises, for the first invalid argument.
    """
    if isinstance(given, cls):
        return given
    if given is None:
        return cls()
    return from_mapping(cls, given, fail)


def from_mapping(cls: type[T], inputs: Any, fail: Fail = ArgumentError.of, path: str = "") -> T:
    """Build the args dataclass ``cls`` from a mapping of its field names to values.

    Whole-number floats become ints in the fields that hold ints (Pulumi carries every number as a
    float); a field holding a sequence of args dataclasses (or one) takes mappings for them, built the
    same way.

    Args:
        cls: a dataclass that validates itself.
        inputs: field names to values.
        fail: makes the error for a mapping that is not one, names a field ``cls`` lacks or lacks a
            required one.
        path: where ``inputs`` sits in the arguments, for the field names in errors (``flavors[0].``).

    Raises:
        Exception: what ``fail`` makes, or the dataclass raises.
    """
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    if not isinstance(inputs, Mapping):
        raise fail(path.rstrip(".") or "args", inputs, f"must be a {cls.__name__} or a mapping of its fields",
                   f"pass {cls.__name__}(...) or a dict of {', '.join(fields)}")
    for key, value in inputs.items():
        if key not in fields:
            raise fail(f"{path}{key}", value, f"is not a {cls.__name__} field", f"use one of {', '.join(fields)}")
    for name, spec in fields.items():
        required = spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING
        if required and name not in inputs:
            raise fail(f"{path}{name}", None, "is required", f"set {name}")
    hints = typing.get_type_hints(cls, localns=_PULUMI_NAMES)
    values = {key: _converted(hints[key], value, fail, f"{path}{key}") for key, value in inputs.items()}
    return cls(**values)


def _converted(hint: Any, value: Any, fail: Fail, path: str) -> Any:
    """``value`` with whole-number floats as ints where ``hint`` admits an int, and mappings as the args
    dataclasses ``hint`` holds, at any depth of its mappings and sequences."""
    members = _members(hint)
    if isinstance(value, float) and value.is_integer() and int in members:
        return int(value)
    for member in members:
        origin = typing.get_origin(member)
        if dataclasses.is_dataclass(member) and isinstance(value, Mapping):
            return from_mapping(member, value, fail, f"{path}.")  # type: ignore[arg-type]
        if origin in _MAPPINGS and isinstance(value, Mapping):
            item = (typing.get_args(member) or (str, Any))[-1]
            return {k: _converted(item, v, fail, f"{path}[{k!r}]") for k, v in value.items()}
        if origin in _SEQUENCES and isinstance(value, (list, tuple)):
            item = next(iter(typing.get_args(member)), Any)
            return [_converted(item, v, fail, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


_MAPPINGS = (Mapping, dict, typing.Mapping)
_SEQUENCES = (Sequence, list, tuple, typing.Sequence)


def _members(hint: Any) -> tuple[Any, ...]:
    """The types a hint admits at its top level (``Optional[int]`` → ``int, None``)."""
    args = typing.get_args(hint)
    return args if typing.get_origin(hint) is typing.Union else (hint,)
