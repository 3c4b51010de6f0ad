"""How the job args tests check an ``InvalidJobArgs``: it names the field, carries the value as given, and
says what is wrong and how to fix it."""

from __future__ import annotations

from typing import Any, Mapping

from components.errors import InvalidJobArgs


def as_given(value: Any) -> Any:
    """A value as the caller wrote it: the args freeze lists into tuples and dicts into read-only views."""
    if isinstance(value, (list, tuple)):
        return [as_given(v) for v in value]
    if isinstance(value, Mapping):
        return {k: as_given(v) for k, v in value.items()}
    return value


def assert_names_field_value_and_fix(
    error: InvalidJobArgs, field: str, value: Any, problem: str, fix: str
) -> None:
    """The error names ``field``, carries exactly ``value`` (quoted in the message) and says what is wrong and
    how to fix it."""
    assert error.field == field
    assert as_given(error.value) == as_given(value)
    assert problem in error.problem
    assert fix in error.fix
    assert str(error) == f"{field}={error.value!r}: {error.problem}; {error.fix}"
