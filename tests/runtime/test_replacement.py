"""A replacement agent of any index, node 0's included, joins the running world instead of starting a
new one: it finds the current coordinator through the other indices' agents (``TRAINPLANE_PEERS``,
as pods find each other by their names under the headless Service). A replaced node 0 used to start a
second rendezvous (``1/3 nodes registered``) and exit 3 at the quorum timeout."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.agent.errors import TransportError
from runtime.agent.net.transport import request_json
from tests.conftest import ROOT, AgentCluster, wait_until
from tests.runtime.agent.rendezvous.test_elastic_jobs import recording

pytestmark = pytest.mark.process

RECORDER = ROOT / "bench" / "recorder.py"


def world_of(job, host: str) -> list[int]:
    """The node ids of the running world the coordinator on ``host`` has (empty if it does not answer)."""
    try:
        snapshot = request_json(host, job.port, "GET", "/members", job.token, job=job.job)
    except TransportError:
        return []
    if snapshot["status"] != "running":
        return []
    return [m["node_id"] for m in snapshot["members"] if m["node_rank"] is not None and m["state"] != "dead"]


@contextlib.contextmanager
def node_0_lost(tmp_path: Path, stop: Path) -> Iterator[AgentCluster]:
    """Three hand-started elastic agents that know each other (``TRAINPLANE_PEERS``), once node 0 was
    killed and node 1 coordinates the world [1, 2]."""
    out = tmp_path / "events"
    out.mkdir()
    with recording(tmp_path, (RECORDER, out, stop), 3, TRAINPLANE_MIN_WORKERS="1",
                   TRAINPLANE_PEERS="127.0.0.1{index}") as job:
        assert wait_until(lambda: world_of(job, "127.0.0.10") == [0, 1, 2], timeout=30), job.log(0)
        job.kill(0)
        assert wait_until(lambda: world_of(job, "127.0.0.11") == [1, 2], timeout=30), job.log(1)
        yield job


def test_replacements_of_node_0_and_of_another_node_join_the_running_world(tmp_path: Path):
    stop = tmp_path / "stop"
    with node_0_lost(tmp_path, stop) as job:
        job.agents[0].wait()
        job.add(0)  # node 0's pod, replaced
        assert wait_until(lambda: world_of(job, "127.0.0.11") == [0, 1, 2], timeout=30), job.log(0) + job.log(1)
        assert "the job already runs, coordinated from 127.0.0.11" in job.log(0)
        job.kill(2)
        assert wait_until(lambda: world_of(job, "127.0.0.11") == [0, 1], timeout=30), job.log(1)
        job.agents[2].wait()
        job.add(2)  # registers with 127.0.0.10, which no longer coordinates: it asks the others
        assert wait_until(lambda: world_of(job, "127.0.0.11") == [0, 1, 2], timeout=30), job.log(2) + job.log(1)
        stop.touch()
        assert {i: a.wait(timeout=60) for i, a in job.agents.items()} == {0: 0, 1: 0, 2: 0}, job.log(1)


def test_a_replacement_whose_coordinator_name_does_not_resolve_joins_through_its_peers(tmp_path: Path):
    """Node 0's pod is gone, and its DNS record with it (``<job>-0.<svc>`` no longer resolves): a
    replacement asks its peers while the name does not resolve, instead of waiting out the quorum
    timeout and exiting 3."""
    stop = tmp_path / "stop"
    with node_0_lost(tmp_path, stop) as job:
        job.kill(2)
        assert wait_until(lambda: world_of(job, "127.0.0.11") == [1], timeout=30), job.log(1)
        job.agents[2].wait()
        # Not in TRAINPLANE_RESOLVE and not in DNS (.invalid): node 0's name, once its pod is gone.
        job.settings["TRAINPLANE_COORDINATOR"] = f"{job.job}-0.{job.job}.invalid:{job.port}"
        job.settings["TRAINPLANE_QUORUM_TIMEOUT"] = "20"
        job.add(2)
        assert wait_until(lambda: world_of(job, "127.0.0.11") == [1, 2], timeout=30), job.log(2) + job.log(1)
        stop.touch()
        assert {i: job.agents[i].wait(timeout=60) for i in (1, 2)} == {1: 0, 2: 0}, job.log(1) + job.log(2)
