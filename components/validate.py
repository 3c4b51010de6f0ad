"""The components' checks, in the job spec's vocabulary: each is a ``Check`` (``runtime.agent.spec.setting``)
answering ``(problem, fix)``, and :func:`require` is the one adapter that raises it as the component's
error (:class:`ArgumentError` for the cluster and add-on args, :class:`InvalidJobArgs` for a job's).

Also the one copy of the API server's syntax rules (``k8s.io/apimachinery/pkg/util/validation`` and
``pkg/api/resource``) that every component's checks use, as checks of their own.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Optional

from components.errors import ArgumentError, StackConfigError
from runtime.agent.spec import setting
from runtime.agent.spec.setting import Check

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
DNS1035_RULE = "lower-case letters, digits and '-', starting with a letter and ending with a letter or digit"
DNS1123_RULE = "lower-case letters, digits and '-', starting and ending with a letter or digit"
SUBDOMAIN_RULE = "dot-separated lower-case labels of letters, digits and '-'"
LABEL_FIX = "use at most 63 letters, digits, '-', '_' or '.', alphanumeric at both ends"


def require(field: str, value: object, check: Check,
            error: type[ArgumentError] | type[StackConfigError] = ArgumentError) -> None:
    """Raise ``check``'s answer for ``value`` as the component's error (``error.of``).

    Args:
        field: the argument's name (a stack config key for :class:`StackConfigError`), for the message.
        value: the candidate value.
        check: its check.
        error: :class:`ArgumentError`, a subclass such as ``InvalidJobArgs``, or :class:`StackConfigError`.

    Raises:
        ArgumentError: (or ``error``) ``check`` refuses ``value``.
    """
    found = check(value)
    if found is not None:
        raise error.of(field, value, *found)


def pattern(regex: re.Pattern[str], rule: str, max_length: Optional[int]) -> Check:
    """A check for a name in the syntax ``regex`` (``rule`` says it in words) of at most ``max_length``
    characters (``None``: the caller checks the length)."""

    def check(value: Any) -> Optional[tuple[str, str]]:
        if not isinstance(value, str) or not regex.match(value):
            return "not a valid name", f"use {rule}"
        if max_length is not None and len(value) > max_length:
            return f"is {len(value)} characters long", f"shorten it to {max_length}"
        return None

    return check


DNS_LABEL = pattern(DNS1123_LABEL, DNS1123_RULE, MAX_LABEL)
"""An RFC 1123 DNS label of at most 63 characters (what Kubernetes namespace and most object names must be)."""
SUBDOMAIN = pattern(DNS1123_SUBDOMAIN, SUBDOMAIN_RULE, MAX_SUBDOMAIN)
"""An RFC 1123 subdomain of at most 253 characters (most object names)."""


def quantity(value: Any) -> Optional[tuple[str, str]]:
    """A check for a Kubernetes resource quantity such as ``"512Mi"``, ``"8Gi"`` or ``"1.5"``."""
    ok = isinstance(value, str) and QUANTITY.match(value) is not None
    return None if ok else ("not a Kubernetes quantity", 'write it like "512Mi" or "8Gi"')


def absolute_path(value: Any) -> Optional[tuple[str, str]]:
    """A check for an absolute POSIX path (a path inside the container)."""
    ok = isinstance(value, str) and value.startswith("/")
    return None if ok else ("must be an absolute path in the container", 'start it with "/"')


def env_name(value: Any) -> Optional[tuple[str, str]]:
    """A check for a container environment variable name."""
    ok = isinstance(value, str) and ENV_NAME.match(value) is not None
    return None if ok else ("not an environment variable name",
                            "use letters, digits, '_', '-' or '.', not starting with a digit")


def _is_label_name(name: str) -> bool:
    return len(name) <= MAX_LABEL and LABEL_NAME.match(name) is not None


def label_key(value: Any) -> Optional[tuple[str, str]]:
    """A check for a label key: an optional DNS subdomain prefix and ``/``, then a label name."""
    if not isinstance(value, str):
        return "label keys are strings", "pass a str key"
    prefix, _, name = value.rpartition("/")
    if prefix and (len(prefix) > MAX_SUBDOMAIN or not DNS1123_SUBDOMAIN.match(prefix)):
        return "the prefix before '/' is not a DNS subdomain", 'use a prefix such as "example.com/"'
    return None if _is_label_name(name) else ("not a label name", LABEL_FIX)


def label_value(value: Any) -> Optional[tuple[str, str]]:
    """A check for a label value: empty, or a label name."""
    ok = isinstance(value, str) and (not value or _is_label_name(value))
    return None if ok else ("not a label value", LABEL_FIX)


def distinct(fix: str) -> Check:
    """A check for a list that holds no value twice; the problem names the repeated ones."""

    def check(value: Any) -> Optional[tuple[str, str]]:
        items = list(value)
        repeated = sorted({str(item) for item in items if items.count(item) > 1})
        return (f"repeats {', '.join(repeated)}", fix) if repeated else None

    return check


NAMED_ONCE = distinct("give each one its own name")
"""Names of things defined side by side (queues, node groups, jobs): each names one."""
LISTED_ONCE = distinct("list each one once")
"""Choices listed side by side (gang schedulers, frameworks): each once."""


def defined(kind: str, names: Collection[str]) -> Check:
    """A check for a reference to one of ``names``, the ``kind`` objects defined beside it."""
    listed = ", ".join(sorted(names))
    fix = f"use one of {listed}" if names else f"define the {kind} first"

    def check(value: Any) -> Optional[tuple[str, str]]:
        return None if value in names else (f"names no defined {kind}", fix)

    return check


def whole(minimum: int) -> Check:
    """A check for a whole number (an ``int``, not a ``bool``) of at least ``minimum``."""
    return setting.whole(minimum, f"use a whole number >= {minimum}")


def dns_label(field: str, value: object) -> str:
    """Check that ``value`` is an RFC 1123 DNS label (:data:`DNS_LABEL`) and return it.

    Raises:
        ArgumentError: it is not.
    """
    require(field, value, DNS_LABEL)
    return str(value)


def boolean(field: str, value: object) -> bool:
    """Check that ``value`` is ``True`` or ``False`` (the spec's ``flag`` check) and return it.

    Raises:
        ArgumentError: it is not: "must be true or false; use true or false".
    """
    require(field, value, setting.flag)
    return bool(value)


def integer(field: str, value: object, minimum: int = 0) -> int:
    """Check that ``value`` is an ``int`` (not a ``bool``) of at least ``minimum`` and return it.

    Raises:
        ArgumentError: it is not.
    """
    require(field, value, whole(minimum))
    return int(value)  # type: ignore[call-overload]  # an int, checked above


def strings(field: str, value: object, non_empty: bool = False) -> tuple[str, ...]:
    """Check that ``value`` is a sequence of non-empty strings (at least one when ``non_empty``) and return
    it as a tuple.

    Raises:
        ArgumentError: ``value`` is a bare string, not a sequence, holds a non-string or an empty
            string, or is empty while ``non_empty`` is set.
    """
    items = tuple(value) if isinstance(value, Sequence) and not isinstance(value, str) else value
    found = setting.strings("use a list of non-empty strings", empty_items=False, at_least_one=non_empty)(items)
    if found is not None:
        raise ArgumentError.of(field, value, *found)
    return tuple(items)  # type: ignore[arg-type]  # a tuple of strings, checked above


def one_of(field: str, value: object, allowed: Sequence[str]) -> str:
    """Check that ``value`` is one of ``allowed`` and return it.

    Raises:
        ArgumentError: it is not; the message lists the allowed values.
    """
    require(field, value, setting.one_of(allowed))
    return str(value)


def text(field: str, value: object) -> str:
    """Check that ``value`` is a string that is not blank and return it.

    Raises:
        ArgumentError: it is not.
    """
    require(field, value, setting.text("give a non-empty string", blank=False))
    return str(value)


def labels(field: str, value: object, error: type[ArgumentError] = ArgumentError) -> None:
    """Check that ``value`` is a mapping of label keys to label values (:func:`label_key`, :func:`label_value`).

    Raises:
        ArgumentError: (or ``error``) not a mapping, or a key or value breaks the label syntax; names the
            key as ``field[key]``.
    """
    if not isinstance(value, Mapping):
        raise error.of(field, value, "must be a mapping of label keys to values", "pass a dict")
    for key, item in value.items():
        require(f"{field}[{key!r}]", key, label_key, error)
        require(f"{field}[{key!r}]", item, label_value, error)
