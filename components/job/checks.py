"""The checks of ``DistributedJobArgs`` fields, raising :class:`InvalidJobArgs`.

Each takes the argument's name (for the message) and its value, and returns nothing: it either passes or
raises with the field, the value, the problem and the fix. The value checks are the job spec's and the API
server's (``runtime.agent.spec.setting``, :mod:`components.validate`), raised through
``components.validate.require``, so one rule has one wording, and a bad value fails at preview instead of
at apply.
"""

from __future__ import annotations

import inspect
from typing import Any, Mapping, Optional

import pulumi

from components import validate
from components.errors import InvalidJobArgs
from runtime.agent.spec import setting

PLAIN_FIX = "it decides what the job renders, which Pulumi must know when the job is created"


def require_plain(field: str, value: Any, expected: str) -> None:
    """Require a plain Python value: no ``pulumi.Output`` or other awaitable (a Pulumi ``Input``)
    at any depth of the lists, tuples and mappings in ``value``. For the arguments that decide the shape
    of what is rendered (which objects, their names, counts and ports).

    Args:
        field: the argument's name; nested items are reported as ``field[0]``, ``field['key']``.
        value: the candidate value.
        expected: the plain type to name in the fix, e.g. ``"str"`` or ``"list[str]"``.

    Raises:
        InvalidJobArgs: names the innermost field holding an unresolved value.
    """
    if isinstance(value, pulumi.Output) or inspect.isawaitable(value):
        kind = "a pulumi Output" if isinstance(value, pulumi.Output) else "an awaitable"
        raise InvalidJobArgs(field, value, f"is {kind}, whose value is not known when the job is checked",
                             f"pass a plain {expected}; {PLAIN_FIX}")
    if isinstance(value, Mapping):
        for key, item in value.items():
            require_plain(f"{field} key", key, "str")
            require_plain(f"{field}[{key!r}]", item, "value")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            require_plain(f"{field}[{i}]", item, "value")


def require_int(field: str, value: Any, minimum: int) -> None:
    """Require a whole number (not a bool) no smaller than ``minimum``.

    Raises:
        InvalidJobArgs: ``value`` is not an int, or is below ``minimum``.
    """
    validate.require(field, value, validate.whole(minimum), InvalidJobArgs)


def require_port(field: str, value: Any) -> None:
    """Require a TCP port, 1 to 65535 (the agent's environment words the rule alike).

    Raises:
        InvalidJobArgs: ``value`` is not a whole number in that range.
    """
    validate.require(field, value, setting.tcp_port(), InvalidJobArgs)


def require_positive_number(field: str, value: Any) -> None:
    """Require an int or float greater than zero (not a bool).

    Raises:
        InvalidJobArgs: ``value`` is not a number or is <= 0.
    """
    validate.require(field, value, setting.positive("pass a positive int or float"), InvalidJobArgs)


def require_choice(field: str, value: Any, choices: tuple[str, ...]) -> None:
    """Require one of ``choices``.

    Raises:
        InvalidJobArgs: ``value`` is not one of them.
    """
    validate.require(field, value, setting.one_of(choices), InvalidJobArgs)


def require_dns1035(field: str, value: Any, max_length: Optional[int] = validate.MAX_LABEL) -> None:
    """Require an RFC 1035 label (Service and PyTorchJob names): ``[a-z]([-a-z0-9]*[a-z0-9])?``.

    Args:
        field: the argument's name.
        value: the candidate name.
        max_length: the longest allowed name, characters; ``None`` when the caller checks length.

    Raises:
        InvalidJobArgs: wrong type, pattern, or longer than ``max_length`` characters.
    """
    validate.require(field, value, validate.pattern(validate.DNS1035_LABEL, validate.DNS1035_RULE, max_length),
                     InvalidJobArgs)


def require_dns1123_label(field: str, value: Any) -> None:
    """Require an RFC 1123 label (namespace names), at most 63 characters.

    Raises:
        InvalidJobArgs: wrong type, pattern or length.
    """
    validate.require(field, value, validate.DNS_LABEL, InvalidJobArgs)


def require_dns1123_subdomain(field: str, value: Any) -> None:
    """Require an RFC 1123 subdomain (most object names), at most 253 characters.

    Raises:
        InvalidJobArgs: wrong type, pattern or length.
    """
    validate.require(field, value, validate.SUBDOMAIN, InvalidJobArgs)


def require_quantity(field: str, value: Any) -> None:
    """Require a Kubernetes resource quantity such as ``"512Mi"``, ``"8Gi"`` or ``"1.5"``.

    Raises:
        InvalidJobArgs: not a string in quantity syntax.
    """
    validate.require(field, value, validate.quantity, InvalidJobArgs)


def require_absolute_path(field: str, value: Any) -> None:
    """Require an absolute POSIX path (paths inside the container).

    Raises:
        InvalidJobArgs: not a string starting with ``/``.
    """
    validate.require(field, value, validate.absolute_path, InvalidJobArgs)


def require_labels(field: str, labels: Any) -> None:
    """Require a mapping of valid label keys to valid label values (``components.validate.labels``).

    Raises:
        InvalidJobArgs: not a mapping, or a key or value breaks the label syntax.
    """
    validate.labels(field, labels, InvalidJobArgs)


def require_env_name(field: str, name: Any) -> None:
    """Require a valid container environment variable name.

    Raises:
        InvalidJobArgs: empty, not a string, or containing characters Kubernetes rejects.
    """
    validate.require(field, name, validate.env_name, InvalidJobArgs)


def require_strings(name: str, value: Any, problem: str, fix: str) -> None:
    """Raise :class:`InvalidJobArgs` for ``name`` unless ``value`` is a list (frozen to a tuple) of strings."""
    if not isinstance(value, tuple) or not all(isinstance(x, str) for x in value):
        raise InvalidJobArgs(name, value, problem, fix)


def require_list(name: str, value: Any) -> None:
    """Raise :class:`InvalidJobArgs` for ``name`` unless ``value`` is a list (frozen to a tuple)."""
    if not isinstance(value, tuple):
        raise InvalidJobArgs(name, value, "must be a list of dicts", "pass a list (or tuple)")
