"""The straggler report and the job's time limit, decided on a fake clock."""

from __future__ import annotations

import pytest

from runtime.agent.rendezvous.stragglers import Stragglers
from runtime.agent.world import Node, World

pytestmark = pytest.mark.unit

WALL = 1_700_000_000.0


def world(generation: int = 1) -> World:
    return World(job="j", generation=generation, restart_count=0, max_restarts=0,
                 nodes=(Node(0, "10.0.0.1", 32300, 2), Node(1, "10.0.0.2", 32300, 2)), master_port=29500)


def watch(**kw) -> Stragglers:
    return Stragglers(kw.pop("hang_report_after", 10.0), kw.pop("timeout", None), kw.pop("started", 0.0),
                      wall=lambda: WALL)


def test_a_silent_rank_is_reported_only_once_another_has_finished_then_again_each_period():
    w, s = world(), watch()
    s.note(1, [[2, None, 30.0], [3, None, 1.0]], 1, now=5.0)
    assert s.check(w, 5.0) == ([], None), "nobody has finished: a long silence alone is not straggling"
    s.note(0, [[0, 0, 0.0], [1, None, 12.0]], 1, now=6.0)
    said, expired = s.check(w, 6.0)
    assert expired is None
    assert said == ["straggling after rank 0 finished: rank 1 on node 0 (10.0.0.1): running, no output for 12 s "
                    f"(since {_hms(WALL - 12.0)})",
                    "straggling after rank 0 finished: rank 2 on node 1 (10.0.0.2): running, no output for 31 s "
                    f"(since {_hms(WALL - 31.0)})"]
    assert s.check(w, 7.0) == ([], None), "each rank once per period"
    assert [line.split(":")[1] for line in s.check(w, 16.5)[0]] == [" rank 1 on node 0 (10.0.0.1)",
                                                                   " rank 2 on node 1 (10.0.0.2)",
                                                                   " rank 3 on node 1 (10.0.0.2)"]


def test_the_time_limit_ends_the_job_naming_every_rank_still_running():
    w, s = world(), watch(timeout=60.0, hang_report_after=100.0)
    s.note(0, [[0, 0, 0.0], [1, None, 2.0]], 1, now=50.0)
    assert s.check(w, 59.9) == ([], None)
    said, expired = s.check(w, 60.0)
    assert said == [] and expired == (
        f"time limit of 60 s reached; still running: rank 1 on node 0 (10.0.0.1): running, no output "
        f"for 12 s (since {_hms(WALL - 12.0)}); node 1 (10.0.0.2), ranks not reported")


def test_a_new_generation_forgets_the_old_ranks_and_stale_reports_count_for_nothing():
    s = watch()
    s.note(0, [[0, 0, 0.0], [1, None, 50.0]], 1, now=1.0)
    s.note(0, [[0, None, 0.0]], 2, now=2.0)
    s.note(1, [[1, 0, 0.0], [2, None, 99.0]], 1, now=2.0)
    assert s.check(world(2), 3.0) == ([], None)


def test_a_coordinator_that_takes_over_counts_the_time_limit_from_the_jobs_start():
    """Issue 20 item 4: the job ran 30 s under node 0 (``World.job_elapsed``); the successor, 40 s
    limit, ends it 10 s after taking over, not 40 s."""
    from runtime.agent.rendezvous.coordinator import Coordinator
    from testbed.settings import agent_settings

    settings = agent_settings(job_name="j", node_id=1, workers=2, min_workers=1, max_workers=2, timeout=40.0)
    taken = World.from_json({**world().to_json(), "job_elapsed": 30.0})
    c = Coordinator(settings, 1000.0, world=taken, epoch=2, elapsed=30.0)
    c.liveness.beat(0, 1009.0)
    c.tick(1009.0)
    assert c.world is not None and c.world.status == "running"
    c.liveness.beat(0, 1010.0)
    actions = c.tick(1010.0)
    assert c.world is not None and c.world.status == "failed" and "time limit of 40 s" in c.world.message, actions


def _hms(wall: float) -> str:
    import time
    return time.strftime("%H:%M:%S", time.localtime(wall))
