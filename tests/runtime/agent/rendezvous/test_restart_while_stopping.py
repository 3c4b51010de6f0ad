"""The coordinator decides on while its own ranks are slow to stop: real agents and processes.

Node 0 coordinates a fixed-size job of 3 nodes whose rank on node 0 ignores SIGTERM, so each restart keeps node 0's
main thread in ``StopProcesses`` for the whole grace period. A node killed meanwhile is acted on then (the watch,
the probe, the next restart decided and pushed), not once node 0's rank is finally torn down."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from tests.conftest import AgentCluster, wait_until

pytestmark = pytest.mark.process

RANK = textwrap.dedent('''
    import os, signal, sys, time
    stop = sys.argv[1]
    if os.environ["NODE_RANK"] == "0":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # slow to stop: only the grace period's SIGKILL ends it
    if os.environ["NODE_RANK"] == "1" and os.environ["TRAINPLANE_GENERATION"] == "1":
        time.sleep(1)
        sys.exit(5)  # the first restart
    deadline = time.monotonic() + 120
    while not os.path.exists(stop) and time.monotonic() < deadline:
        time.sleep(0.05)
''')


def test_a_node_lost_while_the_coordinators_ranks_are_slow_to_stop_is_acted_on_before_they_are(tmp_path: Path):
    script, stop = tmp_path / "rank.py", tmp_path / "stop"
    script.write_text(RANK)
    job = AgentCluster(tmp_path, [str(script), str(stop)], workers=3, TRAINPLANE_MAX_RESTARTS="3",
                       TRAINPLANE_GRACE_PERIOD="20")
    try:
        assert wait_until(lambda: "restarting (1/3) as generation 2" in job.log(0), timeout=60), job.log(0)
        job.kill(2)  # node 0's main thread is stopping its rank, for up to 20 s
        assert wait_until(lambda: "restarting (2/3) as generation 3" in job.log(0), timeout=60), job.log(0)
        lines = job.log(0).splitlines()
        [second] = [i for i, line in enumerate(lines) if "restarting (2/3) as generation 3" in line]
        assert re.search(r"node 2 \(127\.0\.0\.12\)", lines[second - 1]), lines[second - 1]
        assert not any("torn down" in line for line in lines[:second]), \
            f"node 2's loss waited for node 0's rank to be torn down:\n{job.log(0)}"
    finally:
        stop.touch()
        job.close()
