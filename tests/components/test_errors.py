"""The components exception tree: one root, and messages that name the field, the value and the fix."""

from __future__ import annotations

import re

import pytest

from components.errors import (
    ArgumentError,
    BundleError,
    ComponentError,
    InvalidJobArgs,
    OperatorRuleError,
    StackConfigError,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "error",
    [
        ArgumentError("workers", -1, "must be 0 or more", "use a whole number >= 0"),
        InvalidJobArgs("workers", 0, "must be >= 1", "pass an int >= 1"),
        StackConfigError("trainplane:kindWorkers", "two", "must be a whole number", "use a whole number"),
        BundleError("too big"),
        OperatorRuleError("no Master"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_every_error_has_the_one_root(error: ComponentError) -> None:
    with pytest.raises(ComponentError):
        raise error


@pytest.mark.parametrize(
    ("error", "message", "detail"),
    [
        (ArgumentError("workers", -1, "must be 0 or more", "use a whole number >= 0"),
         "workers=-1: must be 0 or more; use a whole number >= 0", "must be 0 or more; use a whole number >= 0"),
        (InvalidJobArgs("workers", 0, "must be >= 1", "pass an int >= 1"), "workers=0: must be >= 1; pass an int >= 1",
         "must be >= 1; pass an int >= 1"),
    ],
)
def test_argument_errors_share_field_value_and_detail(error: ArgumentError, message: str, detail: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$") as caught:
        raise error
    assert (caught.value.field, caught.value.value, caught.value.detail) == ("workers", error.value, detail)
    assert caught.value.detail == f"{caught.value.problem}; {caught.value.fix}"


def test_an_argument_errors_of_keeps_the_checks_problem_and_fix_apart() -> None:
    error = ArgumentError.of("workers", -1, "must be 0 or more", "use a whole number >= 0")
    assert type(error) is ArgumentError
    assert (error.problem, error.fix) == ("must be 0 or more", "use a whole number >= 0")
    job = InvalidJobArgs.of("workers", 0, "must be 1 or more", "use 1 or more nodes")
    assert type(job) is InvalidJobArgs and str(job) == "workers=0: must be 1 or more; use 1 or more nodes"


def test_a_stack_config_error_keeps_the_problem_and_the_fix_apart_as_an_argument_error_does() -> None:
    error = StackConfigError("trainplane:kindWorkers", "two", "must be a whole number", "use a whole number")
    assert (error.key, error.value, error.problem, error.fix) == (
        "trainplane:kindWorkers", "two", "must be a whole number", "use a whole number")
    assert str(error) == "trainplane:kindWorkers = 'two': must be a whole number; use a whole number"
    assert error.detail == f"{error.problem}; {error.fix}"
    made = StackConfigError.of("trainplane:kindWorkers", "two", "must be a whole number", "use a whole number")
    assert (type(made), str(made), made.detail) == (StackConfigError, str(error), error.detail)
