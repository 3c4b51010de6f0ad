"""Tree fan-out with real agents and worker processes: 13 nodes, width 3, threshold 4 (three levels)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runtime import RemoteError
from runtime.agent import contract
from runtime.agent.net.transport import request_json
from runtime.client import JobClient
from runtime.local.jobs import LocalJob, LocalJobSpec
from testbed.jobs import serving
from tests.conftest import ROOT, wait_until

pytestmark = pytest.mark.process

FNS = "testbed.service_fns"
NODES = 13


@pytest.fixture(scope="module")
def job() -> Iterator[LocalJob]:
    # Liveness aggregates over the same depth-3 tree; a roomy TTL keeps a loaded machine from
    # declaring a node dead while this test is about calls.
    spec = LocalJobSpec(workers=NODES, num_proc=1, mode="service", master_port=0, grace_period=1.0, heartbeat_ttl=10.0,
                        pythonpath=(str(ROOT),), tree_threshold=4, tree_fanout=3, allow_pickle=True)
    with serving(spec, ready_timeout=120) as running:
        yield running


def test_the_world_travels_the_tree_each_node_sending_it_to_its_own_children(job: LocalJob):
    def infos() -> list[dict]:
        return [request_json(host, port, "GET", contract.ROUTE_INFO, job.token, job=job.job)
                for host, port in zip(job.plan.addresses, job.plan.ports)]

    assert wait_until(lambda: [i["generation"] for i in infos()] == [1] * NODES, timeout=30)
    # Width 3: the coordinator sends to nodes 1, 5 and 9, each of them to its three children (1 to 2-4),
    # the leaves to nobody: the edges a call to every node takes (rendezvous/tree.py).
    assert [i["worlds_sent"] for i in infos()] == [3, 3, 0, 0, 0, 3, 0, 0, 0, 3, 0, 0, 0]


def sent_by_coordinator(client: JobClient) -> int:
    return int(client.info().raw["service"]["requests_sent"])


def test_a_tree_call_reaches_every_rank_in_order_with_three_requests_from_the_coordinator(job: LocalJob):
    with JobClient(job.url, job.token) as client:
        client.call(f"{FNS}:rank", timeout=120)
        for seed in range(2):
            before = sent_by_coordinator(client)
            results = client.call(f"{FNS}:whoami", 0.2, seed, timeout=60)
            assert sent_by_coordinator(client) - before == 3
            assert [(r["rank"], r["node_rank"]) for r in results] == [(n, n) for n in range(NODES)]


def test_a_flat_subset_and_a_tree_subset_agree_with_the_whole(job: LocalJob):
    with JobClient(job.url, job.token) as client:
        everyone = client.call(f"{FNS}:whoami", timeout=60)
        flat = client.call(f"{FNS}:whoami", timeout=60, node_ranks=[4, 12])
        tree = client.call(f"{FNS}:whoami", timeout=60, node_ranks=[1, 2, 7, 8, 11])
    pids = {r["rank"]: r["pid"] for r in everyone}
    assert [(r["rank"], r["pid"]) for r in flat] == [(4, pids[4]), (12, pids[12])]
    assert [(r["rank"], r["pid"]) for r in tree] == [(n, pids[n]) for n in (1, 2, 7, 8, 11)]


def test_an_error_at_a_leaf_climbs_the_tree(job: LocalJob):
    with JobClient(job.url, job.token) as client, pytest.raises(RemoteError) as info:
        client.call(f"{FNS}:fail_on", 11, 60.0, timeout=60)
    assert (info.value.rank, info.value.node_rank, info.value.exc_type) == (11, 11, "ValueError")


def test_pickled_arguments_and_results_when_the_deployment_opts_in(job: LocalJob):
    with JobClient(job.url, job.token, serialization="pickle") as client:
        results = client.call(f"{FNS}:echo", {1, 2}, key=b"bytes", timeout=60, node_ranks=[0, 5])
    assert results == [{"rank": 0, "args": [{1, 2}], "kwargs": {"key": b"bytes"}},
                       {"rank": 5, "args": [{1, 2}], "kwargs": {"key": b"bytes"}}]
