"""Exceptions of the workflow API beyond the runtime's own (``runtime.agent.errors``).

Tree::

    TrainplaneError                        (runtime.agent.errors)
    ├── ConfigError (also ValueError)      a compute's or a call's setting is invalid (runtime.agent.errors)
    ├── NestedJobError (also RuntimeError) ``.to()`` called from inside a job's own process
    └── DeployError                        the Pulumi Automation API could not deploy, read or destroy
                                           a ``KubernetesCompute``'s stack

``fn()`` refuses a function other processes cannot import with a ``ValueError`` (as before).
"""

from __future__ import annotations

from runtime.agent.errors import TrainplaneError


class NestedJobError(TrainplaneError, RuntimeError):
    """``.to()`` (deploying or attaching a compute) was called inside a process of a job.

    The usual cause is a driver script without ``if __name__ == "__main__":``: the job's processes
    import the driver's module to find a function defined in it, and its top-level code would start
    another job from inside this one, again and again.
    """


class DeployError(TrainplaneError):
    """A stack operation (``pulumi up``, reading outputs, ``pulumi destroy``) failed.

    The message names the stack, the operation and the end of Pulumi's own output.

    Attributes:
        stack: the stack's name (the job's name).
        operation: ``up``, ``outputs`` or ``destroy``.
    """

    def __init__(self, stack: str, operation: str, message: str) -> None:
        self.stack = stack
        self.operation = operation
        super().__init__(message)

    def __reduce__(self) -> tuple[type, tuple[str, str, str]]:
        return (type(self), (self.stack, self.operation, str(self)))
