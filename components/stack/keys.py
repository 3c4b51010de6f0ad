"""Stack config keys: their types, how raw config strings decode, and how argument errors map to keys.

Pulumi hands the program every config value as a string (JSON for numbers, booleans, lists and
objects). Defaults live in ``Pulumi.yaml``; this module only knows each key's type.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any, Callable, Optional, TypeVar

from components.errors import ArgumentError, StackConfigError

NAMESPACE = "trainplane"
"""The project name, which Pulumi uses as the namespace of the project's config keys."""

KEY_TYPES: dict[str, type] = {
    "clusterKind": str,
    "clusterName": str,
    "kindWorkers": int,
    "kindNodeImage": str,
    "kindImages": list,
    "kubeconfig": str,
    "kubeContext": str,
    "existingGpuNodes": bool,
    "existingStorageClasses": dict,
    "existingDefaultStorageClass": str,
    "eksVersion": str,
    "vpcId": str,
    "vpcCidr": str,
    "publicSubnetIds": list,
    "privateSubnetIds": list,
    "availabilityZones": list,
    "systemInstanceType": str,
    "systemNodes": int,
    "gpuNodeGroups": list,
    "eksStorage": list,
    "eksAutoscaler": bool,
    "eksClusterName": str,
    "addons": list,
    "volcanoQueue": str,
    "trainingOperatorGangScheduler": str,
    "kueue": dict,
    "addonCopies": dict,
    "jobs": list,
}
"""Every config key the program reads, with the Python type its value decodes to."""

_TYPE_HINTS = {int: "a whole number", bool: "true or false", list: "a list", dict: "an object"}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BRACKETS = re.compile(r"(\[[^\]]*\])")

T = TypeVar("T")


def full_key(path: str) -> str:
    """``gpuNodeGroups[0].name`` → ``trainplane:gpuNodeGroups[0].name``."""
    return f"{NAMESPACE}:{path}"


def read(get: Callable[[str], Optional[str]]) -> dict[str, Any]:
    """Read and decode every key in ``KEY_TYPES``.

    Args:
        get: Returns a key's raw string value, or None when unset (``pulumi.Config().get``).

    Returns:
        Key to decoded value; unset keys and empty strings become None.

    Raises:
        StackConfigError: A value does not decode to its key's type.
    """
    return {key: _decode(key, get(key), kind) for key, kind in KEY_TYPES.items()}


def _decode(key: str, raw: Optional[str], kind: type) -> Any:
    if raw is None or raw == "":
        return None
    if kind is str:
        return raw
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    if isinstance(value, bool) != (kind is bool) or not isinstance(value, kind):
        raise StackConfigError.of(full_key(key), value, f"must be {_TYPE_HINTS[kind]}", f"use {_TYPE_HINTS[kind]}")
    return value


REQUIRED = ("is required", "set it")
"""The ``(problem, fix)`` of a required key left unset."""


def not_installed(path: str, value: Any, addon: str, kind: str) -> StackConfigError:
    """The error for config path ``path`` (a ``kind``: a key, or an entry of one) holding ``value``, which
    configures add-on ``addon``, where ``trainplane:addons`` does not install it."""
    return StackConfigError.of(full_key(path), value, f"configures {addon}, which trainplane:addons does not install",
                               f"add {addon} to trainplane:addons or remove this {kind}")


def not_an_object(path: str, raw: Any, known: list[str]) -> StackConfigError:
    """The error for config path ``path`` (e.g. ``kueue``) holding ``raw`` where an object with
    keys ``known`` belongs."""
    return StackConfigError.of(full_key(path), raw, "must be an object", f"use an object with keys from {known}")


def not_a_key(path: str, key: str, value: Any, known: list[str]) -> StackConfigError:
    """The error for key ``key`` (holding ``value``) in the object at config path ``path``, whose
    keys are ``known``."""
    return StackConfigError.of(full_key(f"{path}.{key}"), value, f"is not a key of {path}", f"use one of {known}")


def camel(name: str) -> str:
    """``gpu_node_groups`` → ``gpuNodeGroups``."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def config_path(field: str, rename: Mapping[str, str]) -> str:
    """Turn an argument path into a config path.

    Identifiers outside brackets are camel-cased; the first one goes through ``rename`` first.
    ``gpu_node_groups[1].availability_zone`` → ``gpuNodeGroups[1].availabilityZone``.
    """
    first = True

    def convert(match: re.Match[str]) -> str:
        nonlocal first
        name, renamed = match.group(0), rename.get(match.group(0)) if first else None
        first = False
        return renamed or camel(name)

    return "".join(part if part.startswith("[") else _IDENTIFIER.sub(convert, part) for part in _BRACKETS.split(field))


def translate(exc: ArgumentError, prefix: str, rename: Mapping[str, str]) -> StackConfigError:
    """Turn an argument error into a stack config error on the matching key.

    Args:
        exc: An ``ArgumentError`` (or its job subclass ``InvalidJobArgs``).
        prefix: Config path of the object the arguments came from, with a trailing ``.``
            (or empty for top-level keys).
        rename: Argument names whose config key is not simply their camel-case form.

    Returns:
        The error to raise, with the key, the value, and the argument error's problem and fix.
    """
    return StackConfigError(full_key(prefix + config_path(exc.field, rename)), exc.value, exc.problem, exc.fix)


def build(cls: type[T], raw: Any, path: str, drop: tuple[str, ...] = ()) -> T:
    """Build args dataclass ``cls`` from a config object whose keys are its fields in camelCase.

    Args:
        cls: A frozen args dataclass that validates itself.
        raw: The decoded config object.
        path: Its config path, e.g. ``gpuNodeGroups[0]``.
        drop: Keys of ``raw`` that are not fields (handled by the caller).

    Returns:
        The validated args.

    Raises:
        StackConfigError: ``raw`` is not an object, has an unknown key, lacks a required key, or
            the args reject a value.
    """
    fields = {camel(f.name): f for f in dataclasses.fields(cls)}  # type: ignore[arg-type] # T is a dataclass
    if not isinstance(raw, Mapping):
        raise not_an_object(path, raw, sorted(fields))
    for key in raw:
        if key not in fields and key not in drop:
            raise not_a_key(path, key, raw[key], sorted(fields))
    for key, f in fields.items():
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required and key not in raw:
            raise StackConfigError.of(full_key(f"{path}.{key}"), None, *REQUIRED)
    try:
        return cls(**{fields[key].name: value for key, value in raw.items() if key in fields})
    except ArgumentError as exc:
        raise translate(exc, f"{path}.", {}) from exc
