"""Errors raised by the trainplane Pulumi components, all at preview time.

ComponentError                 base of every error this package raises
├── ArgumentError              a component argument is invalid: field, value, fix
│   └── InvalidJobArgs         a DistributedJobArgs field (or the job name) is invalid: field, value, problem, fix
├── StackConfigError           a stack config value is invalid: config key, value, fix
├── BundleError                the runtime bundle cannot be built from runtime/agent/
└── OperatorRuleError          a rendered PyTorchJob breaks a training-operator rule
"""

from __future__ import annotations


class ComponentError(Exception):
    """Base class of every error raised by ``components``."""


class ArgumentError(ComponentError, ValueError):
    """A component argument is invalid.

    The message is ``"<field>=<value!r>: <detail>"``.

    Attributes:
        field: The argument's name as the component spells it (``snake_case``).
        value: The rejected value.
        fix: What to change, in one sentence.
    """

    def __init__(self, field: str, value: object, fix: str) -> None:
        self.field = field
        self.value = value
        self.fix = fix
        super().__init__(f"{field}={value!r}: {self.detail}")

    @property
    def detail(self) -> str:
        """The message after ``"<field>=<value!r>: "``: what is wrong and how to fix it."""
        return self.fix

    @classmethod
    def of(cls, field: str, value: object, problem: str, fix: str) -> ArgumentError:
        """The error for a ``(problem, fix)`` check's answer (``runtime.agent.spec.setting.Check``): the
        message is ``"<field>=<value!r>: <problem>; <fix>"``."""
        return cls(field, value, f"{problem}; {fix}")


class InvalidJobArgs(ArgumentError):
    """A job argument is invalid. Raised at preview time, before anything is created.

    The message is ``"<field>=<value!r>: <problem>; <fix>"``.

    Attributes:
        field: The argument's name, e.g. ``"quorum_workers"``.
        value: The rejected value.
        problem: What is wrong with it.
        fix: What to do instead.
    """

    def __init__(self, field: str, value: object, problem: str, fix: str) -> None:
        """Build the error.

        Args:
            field: The argument's name.
            value: The rejected value.
            problem: What is wrong with it.
            fix: What to do instead.
        """
        self.problem = problem
        super().__init__(field, value, fix)

    @property
    def detail(self) -> str:
        """``"<problem>; <fix>"``."""
        return f"{self.problem}; {self.fix}"

    @classmethod
    def of(cls, field: str, value: object, problem: str, fix: str) -> InvalidJobArgs:
        """The error for a ``(problem, fix)`` check's answer, its parts kept apart."""
        return cls(field, value, problem, fix)


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

    @classmethod
    def of(cls, key: str, value: object, problem: str, fix: str) -> StackConfigError:
        """The error for a ``(problem, fix)`` check's answer (``runtime.agent.spec.setting.Check``): the
        message is ``"<key> = <value!r>: <problem>; <fix>"``."""
        return cls(key, value, f"{problem}; {fix}")


class BundleError(ComponentError):
    """The runtime bundle (the agent's source files) cannot be built or does not fit a ConfigMap."""


class OperatorRuleError(ComponentError):
    """A rendered PyTorchJob breaks a Kubeflow training-operator rule and would be rejected or misrun."""
