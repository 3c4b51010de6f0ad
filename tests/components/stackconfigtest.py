"""What the stack config tests share: a job, a GPU node group and Kueue's queues from the stack files, a stack's
config parsed with overrides, and the check that a config is refused naming the key, the value and the fix."""

from __future__ import annotations

import copy
import re

import pytest

from components.errors import StackConfigError
from components.stack import parse_stack_config
from tests.components.componenttest import getter, stack_config, stack_file

LOCAL_JOB = stack_file("local")["trainplane:jobs"][0]
GPU_GROUP = stack_file("aws-gpu")["trainplane:gpuNodeGroups"][0]
KUEUE = stack_file("existing")["trainplane:kueue"]
EXISTING_JOB = stack_file("existing")["trainplane:jobs"][0]


def parse(stack: str, **overrides):
    return parse_stack_config(getter(stack_config(stack, **overrides)))


def job(**changes):
    return [{**copy.deepcopy(LOCAL_JOB), **changes}]


def assert_refused(stack, overrides, key, value, fix):
    """The stack's config fails at preview with the key, the value and the fix."""
    with pytest.raises(StackConfigError, match=rf"^{re.escape(key)} = {re.escape(value)}.*{fix}") as caught:
        parse(stack, **overrides)
    assert caught.value.key == key
