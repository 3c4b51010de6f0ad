"""Errors raised by the DistributedJob component and its builders.

::

    JobError                      base of every error raised by components.job
    ├── InvalidJobArgs            a DistributedJobArgs field (or the job name) is wrong; says how to fix it
    ├── BundleError               the runtime bundle cannot be built from runtime/agent/
    └── OperatorRuleError         a rendered PyTorchJob breaks a training-operator rule
"""

from __future__ import annotations

from typing import Any


class JobError(Exception):
    """Base class of every error raised by ``components.job``."""


class InvalidJobArgs(JobError, ValueError):
    """A job argument is invalid. Raised at preview time, before anything is created.

    Attributes:
        field: the argument's name, e.g. ``"quorum_workers"``.
        value: the rejected value.
        fix: what to do instead.
    """

    def __init__(self, field: str, value: Any, problem: str, fix: str) -> None:
        """Build the message ``"<field>=<value!r>: <problem>; <fix>"``.

        Args:
            field: the argument's name.
            value: the rejected value.
            problem: what is wrong with it.
            fix: what to do instead.
        """
        super().__init__(f"{field}={value!r}: {problem}; {fix}")
        self.field = field
        self.value = value
        self.fix = fix


class BundleError(JobError):
    """The runtime bundle (the agent's source files) cannot be built or does not fit a ConfigMap."""


class OperatorRuleError(JobError):
    """A rendered PyTorchJob breaks a Kubeflow training-operator rule and would be rejected or misrun."""
