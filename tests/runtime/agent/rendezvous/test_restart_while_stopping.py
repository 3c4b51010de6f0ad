"""The coordinator decides on while its own ranks are slow to stop: real agents and processes.

Node 0 coordinates a fixed-size job of 3 nodes whose rank on node 0 ignores SIGTERM, so a restart keeps node 0's
main thread in ``StopProcesses`` for the whole grace period. A node killed meanwhile is acted on then (the watch,
the probe, the next restart decided and pushed), not once node 0's rank is finally torn down. With node 2 gone for
good, every restart fails in turn until the job does, all while node 0 still stops generation 1; so node 0 then
starts none of the generations its stop was for or that came after (``superseded``)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from tests.conftest import AgentCluster, wait_until

pytestmark = pytest.mark.process

RANK = textwrap.dedent('''
    import os, signal, sys, time
    out, stop = sys.argv[1], sys.argv[2]
    generation = os.environ["TRAINPLANE_GENERATION"]

    def slow(_signum, _frame):  # slow to stop: only the grace period's SIGKILL ends it
        open(os.path.join(out, f"sigterm-{generation}"), "w").close()

    def wait_for(path):
        deadline = time.monotonic() + 120
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.05)

    if os.environ["NODE_RANK"] == "0":
        signal.signal(signal.SIGTERM, slow)
        open(os.path.join(out, f"ignoring-{generation}"), "w").close()
    if os.environ["NODE_RANK"] == "1" and generation == "1":
        wait_for(os.path.join(out, "ignoring-1"))  # node 0's rank is ready to be slow
        sys.exit(5)  # the first restart
    wait_for(stop)
''')


def test_a_node_lost_while_the_coordinators_ranks_are_slow_to_stop_is_acted_on_before_they_are(tmp_path: Path):
    script, stop = tmp_path / "rank.py", tmp_path / "stop"
    script.write_text(RANK)
    job = AgentCluster(tmp_path, [str(script), str(tmp_path), str(stop)], workers=3, TRAINPLANE_MAX_RESTARTS="3",
                       TRAINPLANE_GRACE_PERIOD="8")
    try:
        assert wait_until((tmp_path / "sigterm-1").exists, timeout=60), job.log(0)
        job.kill(2)  # node 0's main thread is stopping generation 1's rank, for 8 s
        assert job.agents[0].wait(timeout=60) != 0, job.log(0)
        lines = job.log(0).splitlines()
        [second] = [i for i, line in enumerate(lines) if "restarting (2/3) as generation 3" in line]
        assert re.search(r"node 2 \(127\.0\.0\.12\)", lines[second - 1]), lines[second - 1]
        assert not any("torn down" in line for line in lines[:second]), \
            f"node 2's loss waited for node 0's rank to be torn down:\n{job.log(0)}"
        assert any(line.endswith("torn down: rank 0 was killed by SIGKILL") for line in lines), job.log(0)
        assert any("job failed" in line for line in lines), job.log(0)
        started = [line.split(":")[0] for line in lines if "node rank 0 of 3 runs" in line]
        assert started == ["[trainplane node 0] generation 1"], \
            f"node 0 started a generation the worlds that came while it stopped had replaced:\n{job.log(0)}"
    finally:
        stop.touch()
        job.close()
