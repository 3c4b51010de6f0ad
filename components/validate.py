"""Argument checks shared by the component args dataclasses; each raises ``ArgumentError``.

Also the one copy of the API server's syntax rules (``k8s.io/apimachinery/pkg/util/validation`` and
``pkg/api/resource``) that every component's checks use.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from components.errors import ArgumentError

DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
"""RFC 1035 label: Service and PyTorchJob names."""
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
"""RFC 1123 label: namespaces and most short names."""
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
"""RFC 1123 subdomain: most object names."""
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
"""A label value, or a label key's name part."""
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
"""A container environment variable name."""
_DECIMAL = r"(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
QUANTITY = re.compile(rf"^{_DECIMAL}(([KMGTPE]i)|[numkMGTPE]|([eE][-+]?{_DECIMAL}))?$")
"""A non-negative resource quantity (``resource.Quantity`` without a sign), e.g. ``8``, ``500m``, ``64Gi``."""
MAX_LABEL = 63
"""Longest DNS label or label value, characters."""
MAX_SUBDOMAIN = 253
"""Longest DNS subdomain, characters."""


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
    if not isinstance(value, str) or len(value) > MAX_LABEL or not DNS1123_LABEL.match(value):
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
