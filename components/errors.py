"""Errors raised by the trainplane Pulumi components, all at preview time.

ComponentError                 base of every error this package raises
├── ArgumentError              a component argument is invalid: field, value, fix
└── StackConfigError           a stack config value is invalid: config key, value, fix
"""

from __future__ import annotations


class ComponentError(Exception):
    """Base class of every error raised by ``components``."""


class ArgumentError(ComponentError, ValueError):
    """A component argument is invalid.

    Attributes:
        field: The argument's name as the component spells it (``snake_case``).
        value: The rejected value.
        fix: What to change, in one sentence.
    """

    def __init__(self, field: str, value: object, fix: str) -> None:
        self.field = field
        self.value = value
        self.fix = fix
        super().__init__(f"{field}={value!r}: {fix}")


class StackConfigError(ComponentError, ValueError):
    """A stack config value is invalid; raised before any resource is registered.

    Attributes:
        key: The full config key, e.g. ``trainplane:gpuNodeGroups[0].instanceTypes``.
        value: The rejected value.
        fix: What to change, in one sentence.
    """

    def __init__(self, key: str, value: object, fix: str) -> None:
        self.key = key
        self.value = value
        self.fix = fix
        super().__init__(f"{key} = {value!r}: {fix}")
