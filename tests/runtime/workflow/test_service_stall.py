"""A service job whose node 0 agent stalls keeps serving once it resumes (issue 20, item 5).

``LocalCompute(workers=2)``, node 0's agent (the coordinator, where calls arrive) stopped for 5 s
(1.7 TTLs) with ``SIGSTOP``: a world of two nodes never fails over (one survivor is no majority of
two, ``membership.election``), so node 1 waits, orphaned, and no second world forms. Before the
fencing rule node 1 took over in a world of its own, and every later call failed with ``NodeFailed``
naming two generations while ``/members`` reported a healthy job.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from runtime.workflow import LocalCompute, fn
from tests.runtime import service_fns

pytestmark = pytest.mark.process


def test_calls_work_again_after_node_0s_agent_stalled_5_s():
    compute = LocalCompute(workers=2, num_proc=1, grace_period=1.0)
    try:
        rank = fn(service_fns.rank).to(compute)
        assert rank() == [0, 1]
        assert compute.job is not None
        pid = compute.job.agents[0].pid
        os.kill(pid, signal.SIGSTOP)
        time.sleep(5.0)  # the stall's length: the experiment's input, not a wait for an outcome
        os.kill(pid, signal.SIGCONT)
        assert rank() == [0, 1]
        assert rank() == [0, 1], "and the call after it"
    finally:
        compute.teardown()
