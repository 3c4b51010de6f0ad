"""The components exception tree: one root, and messages that name the field, the value and the fix."""

from __future__ import annotations

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
        ArgumentError("workers", -1, "use a whole number >= 0"),
        InvalidJobArgs("workers", 0, "must be >= 1", "pass an int >= 1"),
        StackConfigError("trainplane:kindWorkers", "two", "use a whole number"),
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
        (ArgumentError("workers", -1, "use a whole number >= 0"), "workers=-1: use a whole number >= 0",
         "use a whole number >= 0"),
        (InvalidJobArgs("workers", 0, "must be >= 1", "pass an int >= 1"), "workers=0: must be >= 1; pass an int >= 1",
         "must be >= 1; pass an int >= 1"),
    ],
)
def test_argument_errors_share_field_value_and_detail(error: ArgumentError, message: str, detail: str) -> None:
    with pytest.raises(ValueError, match=f"^{message}$") as caught:
        raise error
    assert (caught.value.field, caught.value.value, caught.value.detail) == ("workers", error.value, detail)
