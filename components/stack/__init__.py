"""The stack: typed config from ``Pulumi.yaml``/``stacks/``, and the program that builds it."""

from components.stack.config import StackConfig, parse_stack_config
from components.stack.program import StackOutputs, build_stack

__all__ = ["StackConfig", "StackOutputs", "build_stack", "parse_stack_config"]
