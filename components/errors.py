"""Errors raised by the trainplane Pulumi components, all at preview time.

ComponentError                 base of every error this package raises
├── ArgumentError              a component argument is invalid: field, value, problem, fix
│   └── InvalidJobArgs         a DistributedJobArgs field (or the job name) is invalid: the same parts
├── StackConfigError           a stack config value is invalid: config key, value, problem, fix
├── BundleError                the runtime bundle cannot be built from runtime/agent/
└── OperatorRuleError          a rendered PyTorchJob breaks a training-operator rule
"""

from __future__ import annotations

from typing import TypeVar


class ComponentError(Exception):
    """Base class of every error raised by ``components``."""


_Argument = TypeVar("_Argument", bound="ArgumentError")


class ArgumentError(ComponentError, ValueError):
    """A component argument is invalid, in the two parts of a ``(problem, fix)`` check
    (``runtime.agent.spec.setting.Check``).

    The message is ``"<field>=<value!r>: <problem>; <fix>"``.

    Attributes:
        field: The argument's name as the component spells it (``snake_case``).
        value: The rejected value.
        problem: What is wrong with it, alone, e.g. ``must be 0 or more``.
        fix: What to change, alone, e.g. ``use a whole number >= 0``.
    """

    def __init__(self, field: str, value: object, problem: str, fix: str) -> None:
        """Build the error.

        Args:
            field: The argument's name.
            value: The rejected value.
            problem: What is wrong with it.
            fix: What to do instead.
        """
        self.field = field
        self.value = value
        self.problem = problem
        self.fix = fix
        super().__init__(f"{field}={value!r}: {self.detail}")

    @property
    def detail(self) -> str:
        """The message after ``"<field>=<value!r>: "``: ``"<problem>; <fix>"``."""
        return f"{self.problem}; {self.fix}"

    @classmethod
    def of(cls: type[_Argument], field: str, value: object, problem: str, fix: str) -> _Argument:
        """The error for a ``(problem, fix)`` check's answer, as the constructor makes it: the one signature
        every component error's ``of`` has (:meth:`StackConfigError.of` too)."""
        return cls(field, value, problem, fix)


class InvalidJobArgs(ArgumentError):
    """A job argument (a ``DistributedJobArgs`` field, or the job name) is invalid. Raised at preview time,
    before anything is created; its parts and message are :class:`ArgumentError`'s, e.g. field
    ``"quorum_workers"``."""


class StackConfigError(ComponentError, ValueError):
    """A stack config value is invalid, in the two parts of a ``(problem, fix)`` check, as
    :class:`ArgumentError` carries them; raised before any resource is registered.

    The message is ``"<key> = <value!r>: <problem>; <fix>"``: :class:`ArgumentError`'s, with the config
    key as Pulumi spells a config value (``key = value``).

    Attributes:
        key: The full config key, e.g. ``trainplane:gpuNodeGroups[0].instanceTypes``.
        value: The rejected value.
        problem: What is wrong with it, alone, e.g. ``must be a list``.
        fix: What to change, alone, e.g. ``use a list of objects``.
    """

    def __init__(self, key: str, value: object, problem: str, fix: str) -> None:
        """Build the error.

        Args:
            key: The full config key.
            value: The rejected value.
            problem: What is wrong with it.
            fix: What to do instead.
        """
        self.key = key
        self.value = value
        self.problem = problem
        self.fix = fix
        super().__init__(f"{key} = {value!r}: {self.detail}")

    @property
    def detail(self) -> str:
        """The message after ``"<key> = <value!r>: "``: ``"<problem>; <fix>"``, as :attr:`ArgumentError.detail`."""
        return f"{self.problem}; {self.fix}"

    @classmethod
    def of(cls, key: str, value: object, problem: str, fix: str) -> StackConfigError:
        """The error for a ``(problem, fix)`` check's answer (``runtime.agent.spec.setting.Check``), as the
        constructor makes it (:meth:`ArgumentError.of`'s signature)."""
        return cls(key, value, problem, fix)


class BundleError(ComponentError):
    """The runtime bundle (the agent's source files) cannot be built or does not fit a ConfigMap."""


class OperatorRuleError(ComponentError):
    """A rendered PyTorchJob breaks a Kubeflow training-operator rule and would be rejected or misrun."""
