"""How a job setting is declared: a ``JobSpec`` field with a :class:`Setting` as its metadata.

The field gives the setting's Python name, type and default; the :class:`Setting` its doc,
the agent's environment variable and how the value is written there (:class:`Codec`), the
command-line spellings, and the check of a value on its own (checks across settings are
``JobSpec``'s). Standard library only.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from runtime.agent.errors import ParseError
from runtime.agent.spec import streams

Check = Callable[[Any], Optional[tuple[str, str]]]
"""A check of one value: ``None`` for a good value, else ``(problem, fix)``. The one vocabulary of checks:
a setting's own (``errors.SpecError``), the agent's environment, ``DistributedJobArgs`` and the cluster and
add-on args (``components.validate.require``) all use the checks below, so one rule has one wording."""
TCP_PORT_FIX = "use a TCP port from 1 to 65535"


@dataclass(frozen=True)
class Codec:
    """How a value is written to (and read from) the agent's environment.

    Attributes:
        encode: value to text.
        parse: text to value; raises :class:`~runtime.agent.errors.ParseError` saying what is wrong
            with the text and how to write it.
    """

    encode: Callable[[Any], str]
    parse: Callable[[str], Any]


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ParseError("must be a whole number", "write it in digits, e.g. 4") from None


def _seconds(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ParseError("must be a number of seconds", "write it as a number, e.g. 30 or 2.5") from None


def _bool(text: str) -> bool:
    word = text.strip().lower()
    if word in ("1", "true", "yes", "on"):
        return True
    if word in ("0", "false", "no", "off"):
        return False
    raise ParseError("must be true or false", "use true or false")


_LIST_FIX = 'use a JSON list of strings, e.g. ["train.py", "--epochs=2"]'


def _strings(text: str) -> tuple[str, ...]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise ParseError("is not JSON", _LIST_FIX) from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ParseError("must be a JSON list of strings", _LIST_FIX)
    return tuple(value)


def _ranks(value: Optional[frozenset[int]]) -> str:
    return "" if value is None else ",".join(str(r) for r in sorted(value))


def _filters(value: Sequence[str]) -> str:
    return ",".join(item.replace(",", ",,") for item in value)


INT = Codec(str, _int)
SECONDS = Codec(lambda v: str(int(v)) if float(v).is_integer() else repr(float(v)), _seconds)
BOOL = Codec(lambda v: "true" if v else "false", _bool)
TEXT = Codec(str, str)
STRINGS = Codec(lambda v: json.dumps(list(v)), _strings)
STD = Codec(lambda v: v.encode(), streams.parse_std)
RANKS = Codec(_ranks, streams.parse_ranks)
FILTERS = Codec(_filters, streams.parse_filters)


@dataclass(frozen=True)
class Setting:
    """One job setting's declaration, beside its ``JobSpec`` field.

    Attributes:
        env: the agent's environment variable (``runtime.agent.contract``).
        doc: what it means, in a user's words (the CLI's help, the front ends' docs).
        codec: how the value is written to ``env``.
        flags: the launcher's spellings of it, the preferred one first (torchrun's among them); none
            for a setting the command line does not take.
        check: the value's own check.
        optional: ``None`` is a value (the setting may be unset).
    """

    env: str
    doc: str
    codec: Codec = TEXT
    flags: tuple[str, ...] = ()
    check: Optional[Check] = None
    optional: bool = False

    def problem(self, value: Any) -> Optional[tuple[str, str]]:
        """``(problem, fix)`` when ``value`` is not a good value of this setting on its own, else ``None``."""
        if value is None and self.optional:
            return None
        return self.check(value) if self.check is not None else None


def setting(default: Any, **declaration: Any) -> Any:
    """A ``JobSpec`` field with ``default`` and a :class:`Setting` made of ``declaration``."""
    return field(default=default, metadata={"setting": Setting(**declaration)})


def whole(low: int, fix: str, high: Optional[int] = None) -> Check:
    """A check for a whole number from ``low`` (to ``high``)."""

    def check(value: Any) -> Optional[tuple[str, str]]:
        if isinstance(value, bool) or not isinstance(value, int):
            return "must be a whole number", fix
        if value < low or (high is not None and value > high):
            return (f"must be {low} or more" if high is None else f"must be from {low} to {high}"), fix
        return None

    return check


def seconds(low: float, fix: str, inclusive: bool = True) -> Check:
    """A check for a finite number of seconds, ``>= low`` (``> low`` unless ``inclusive``)."""

    def check(value: Any) -> Optional[tuple[str, str]]:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return "must be a number of seconds", fix
        if value < low or (value == low and not inclusive):
            return (f"must be {low:g} or more seconds" if inclusive else "must be a positive number of seconds"), fix
        return None

    return check


def tcp_port(fix: str = TCP_PORT_FIX) -> Check:
    """A check for a TCP port, 1 to 65535."""
    return whole(1, fix, 65535)


def positive(fix: str) -> Check:
    """A check for a number greater than 0 (an int or a float, not a bool)."""

    def check(value: Any) -> Optional[tuple[str, str]]:
        ok = not isinstance(value, bool) and isinstance(value, (int, float)) and value > 0
        return None if ok else ("must be a number > 0", fix)

    return check


def one_of(choices: Sequence[str]) -> Check:
    """A check for one of ``choices``."""
    listed = ", ".join(choices)

    def check(value: Any) -> Optional[tuple[str, str]]:
        return None if value in choices else (f"must be one of {listed}", f"use one of {listed}")

    return check


def parses(parse: Callable[[str], Any], fix: str) -> Check:
    """A check that ``parse`` accepts the text (its ``ValueError`` is the problem)."""

    def check(value: Any) -> Optional[tuple[str, str]]:
        if not isinstance(value, str):
            return "must be text", fix
        try:
            parse(value)
        except ValueError as exc:
            return str(exc), fix
        return None

    return check


def text(fix: str, blank: bool = True) -> Check:
    """A check for non-empty text; ``blank``: white space alone is text."""

    def check(value: Any) -> Optional[tuple[str, str]]:
        ok = isinstance(value, str) and bool(value if blank else value.strip())
        return None if ok else ("must be non-empty text", fix)

    return check


def strings(fix: str, empty_items: bool = True, at_least_one: bool = False) -> Check:
    """A check for a list (or tuple) of strings; ``empty_items``: ``""`` is one of them; ``at_least_one``:
    the list may not be empty."""

    def check(value: Any) -> Optional[tuple[str, str]]:
        if not isinstance(value, (tuple, list)) or not all(isinstance(v, str) for v in value):
            return "must be a list of strings", fix
        if not empty_items and not all(value):
            return "must hold no empty string", fix
        if at_least_one and not value:
            return "must list at least one value", fix
        return None

    return check


def flag(value: Any) -> Optional[tuple[str, str]]:
    """A check for ``True`` or ``False``."""
    return None if isinstance(value, bool) else ("must be true or false", "use true or false")
