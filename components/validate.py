"""Argument checks shared by the component args dataclasses; each raises ``ArgumentError``."""

from __future__ import annotations

import re
from collections.abc import Sequence

from components.errors import ArgumentError

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_LABEL_MAX = 63


def dns_label(field: str, value: object) -> str:
    """Check that ``value`` is an RFC 1123 DNS label (what Kubernetes object names must be).

    Args:
        field: Argument name, for the error.
        value: The candidate name.

    Returns:
        The name, unchanged.

    Raises:
        ArgumentError: ``value`` is not a lower-case DNS label of at most 63 characters.
    """
    if not isinstance(value, str) or len(value) > _DNS_LABEL_MAX or not _DNS_LABEL.match(value):
        raise ArgumentError(
            field,
            value,
            "use lower-case letters, digits and '-', at most 63 characters, "
            "starting and ending with a letter or digit",
        )
    return value


def integer(field: str, value: object, minimum: int = 0) -> int:
    """Check that ``value`` is an ``int`` (not a ``bool``) of at least ``minimum``.

    Raises:
        ArgumentError: ``value`` is not an integer or is below ``minimum``.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ArgumentError(field, value, f"use a whole number >= {minimum}")
    return value


def strings(field: str, value: object, non_empty: bool = False) -> tuple[str, ...]:
    """Check that ``value`` is a sequence of non-empty strings and return it as a tuple.

    Raises:
        ArgumentError: ``value`` is a bare string, not a sequence, holds a non-string or an empty
            string, or is empty while ``non_empty`` is set.
    """
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ArgumentError(field, value, "use a list of strings")
    items = tuple(value)
    if any(not isinstance(item, str) or not item for item in items):
        raise ArgumentError(field, value, "use a list of non-empty strings")
    if non_empty and not items:
        raise ArgumentError(field, value, "list at least one value")
    return items


def one_of(field: str, value: object, allowed: Sequence[str]) -> str:
    """Check that ``value`` is one of ``allowed``.

    Raises:
        ArgumentError: ``value`` is not in ``allowed``; the message lists the allowed values.
    """
    if value not in allowed:
        raise ArgumentError(field, value, f"use one of {', '.join(allowed)}")
    return str(value)


def text(field: str, value: object) -> str:
    """Check that ``value`` is a non-empty string.

    Raises:
        ArgumentError: ``value`` is not a string or is blank.
    """
    if not isinstance(value, str) or not value.strip():
        raise ArgumentError(field, value, "give a non-empty string")
    return value
