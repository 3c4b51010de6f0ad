"""The function a call on an instance runs, by the name the workflow API calls it (``contract.INSTANCE_CALL``)."""

from __future__ import annotations

import importlib

import pytest

from runtime.agent import contract
from runtime.agent.service import instances

pytestmark = pytest.mark.unit


def test_the_instance_call_the_workflow_api_names_is_the_agents():
    module, _, name = contract.INSTANCE_CALL.partition(":")
    assert getattr(importlib.import_module(module), name) is instances.call
