"""What the launcher and a batch-mode agent import before any rank starts: every module is start-up
time on the launch's critical path (``bench/launch.py``), so the parts only some jobs need are
imported when used: the service stack (service mode), ``runtime.distributed`` with the rank-side torch
hooks (user code), and ``http.client``/``http.server`` (a service job's readiness poll, a multi-host
join). Each check runs a fresh interpreter, as the launcher and the agents start."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import project_env

pytestmark = pytest.mark.process

ON_DEMAND = ("runtime.agent.service.dispatch", "runtime.agent.service.pool", "runtime.agent.code.fanout",
             "runtime.agent.execution.torchgroup", "runtime.agent.execution.torchhooks",
             "runtime.agent.execution.bootstrap", "http.client", "http.server")


def _loaded_after(statement: str) -> set[str]:
    """Which of ``ON_DEMAND`` a fresh interpreter has loaded after running ``statement``."""
    probe = f"import json, sys; {statement}; print(json.dumps(sorted(m for m in {ON_DEMAND!r} if m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], env=project_env(), capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_the_launcher_and_the_batch_agent_import_none_of_what_only_some_jobs_need() -> None:
    assert _loaded_after("import runtime.local.launch") == set()
    assert _loaded_after("import runtime.agent.agent") == set()


def test_what_is_imported_on_demand_is_there_when_used() -> None:
    """``runtime.distributed`` still resolves (and is the torch-group module); building a service-mode
    node imports the service stack; the rank bootstrap has its hooks."""
    assert _loaded_after("import runtime; assert runtime.distributed.__name__.endswith('torchgroup')") >= {
        "runtime.agent.execution.torchgroup", "runtime.agent.execution.torchhooks"}
    assert _loaded_after("from runtime import distributed") >= {"runtime.agent.execution.torchgroup"}
    assert _loaded_after("import runtime.agent.execution.bootstrap") >= {
        "runtime.agent.execution.bootstrap", "runtime.agent.execution.torchhooks"}
    assert "runtime.agent.service.dispatch" in _loaded_after(
        "from runtime.agent.service.modes import service_node; from testbed.settings import agent_settings; "
        "service_node(agent_settings(), world=lambda: None, say=print, on_unreachable=print, clock=lambda: 0.0, "
        "transport=None)")
