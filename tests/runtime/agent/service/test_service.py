"""Service mode with real agents and real worker processes (2 nodes x 2 processes, local mode)."""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from runtime import CallTimeout, RemoteError, TransportError, Unauthorized
from runtime.agent import contract
from runtime.client import JobClient
from runtime.local.jobs import LocalJob, LocalJobSpec
from testbed.jobs import serving
from tests.conftest import ROOT, wait_until

pytestmark = pytest.mark.process

FNS = "testbed.service_fns"
GRACE = 1.0
OPERATOR_ENV = {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "2", "PET_RDZV_ENDPOINT": "job-master-0:29400"}
"""Variables the training operator would set on the agents' pods: inputs to the agents only."""


@pytest.fixture(scope="module")
def job() -> Iterator[LocalJob]:
    spec = LocalJobSpec(workers=2, num_proc=2, mode="service", master_port=0, grace_period=GRACE,
                        pythonpath=(str(ROOT),), job_name="service-test", env=OPERATOR_ENV)
    with serving(spec, ready_timeout=60) as running:
        yield running


@pytest.fixture
def client(job: LocalJob) -> Iterator[JobClient]:
    with JobClient(job.url, job.token) as c:
        yield c


def raw(job: LocalJob, method: str, path: str, body: bytes | None, token: str | None) -> tuple[int, dict]:
    """One request with exactly these bytes and this token (None: no Authorization header)."""
    url = urlsplit(job.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    conn.request(method, path, body=body, headers=headers)
    response = conn.getresponse()
    return response.status, json.loads(response.read() or b"{}")


def test_results_come_back_in_rank_order_and_process_state_survives(client: JobClient):
    first = client.call(f"{FNS}:whoami", 0.3, 0, timeout=30)
    assert [r["rank"] for r in first] == [0, 1, 2, 3]
    assert [r["node_rank"] for r in first] == [0, 0, 1, 1]
    for seed in (1, 2):
        again = client.call(f"{FNS}:whoami", 0.3, seed, timeout=30)
        assert [r["rank"] for r in again] == [0, 1, 2, 3]
        assert [r["pid"] for r in again] == [r["pid"] for r in first]
        assert all(b["calls"] > a["calls"] for a, b in zip(first, again))


def test_service_workers_get_neither_the_token_nor_agent_settings(client: JobClient):
    expected = sorted((contract.MONITOR_MEMBERS, contract.SERVICE_FD, contract.TRAINPLANE_GENERATION,
                       contract.TRAINPLANE_WORLD_FILE))
    assert client.call(f"{FNS}:agent_only_names", timeout=30) == [expected] * 4


@pytest.mark.parametrize(("workers", "ranks"), [([1], [2, 3]), ([0], [0, 1]), ([1, 0], [0, 1, 2, 3])])
def test_a_subset_of_nodes(client: JobClient, workers: list[int], ranks: list[int]):
    assert client.call(f"{FNS}:rank", timeout=30, node_ranks=workers) == ranks


def test_keyword_and_positional_arguments_reach_every_rank(client: JobClient):
    results = client.invoke(f"{FNS}:echo", [1, [2]], {"timeout": "kw named like an option"}, timeout=30)
    assert results == [{"rank": r, "args": [1, [2]], "kwargs": {"timeout": "kw named like an option"}}
                       for r in range(4)]


def test_an_exception_on_one_rank_is_a_remote_error_and_interrupts_the_others(client: JobClient, tmp_path: Path):
    """The other ranks wait for a gate file that appears only after the test: the error arriving within
    the call's timeout shows it did not wait for them, and the next call running on every rank shows
    they were interrupted (the same processes, not replacements)."""
    gate = tmp_path / "gate"
    pids = [r["pid"] for r in client.call(f"{FNS}:whoami", timeout=30)]
    try:
        with pytest.raises(RemoteError) as info:
            client.call(f"{FNS}:fail_on_gated", 2, str(gate), timeout=30)
        after = client.call(f"{FNS}:whoami", timeout=30)
    finally:
        gate.touch()
    error = info.value
    assert (error.rank, error.node_rank, error.exc_type, error.message) == (2, 1, "ValueError", "rank 2 refuses")
    assert error.fn == f"{FNS}:fail_on_gated"
    assert 'raise ValueError(f"rank {bad_rank} refuses")' in error.remote_traceback
    assert "service_fns.py" in error.remote_traceback and "runtime/agent" not in error.remote_traceback
    assert [r["pid"] for r in after] == pids, "interrupted processes must be kept, not replaced"


def test_a_missed_deadline_names_the_waiting_rank_and_the_job_stays_usable(client: JobClient, tmp_path: Path):
    """Rank 3 waits for a gate file that appears only after the call: only the deadline can end it."""
    gate = tmp_path / "gate"
    try:
        with pytest.raises(CallTimeout) as info:
            client.call(f"{FNS}:gated_on", [3], str(gate), timeout=2.0)
    finally:
        gate.touch()
    assert info.value.pending_ranks == (3,)
    assert "rank(s) 3 had not answered" in str(info.value)
    assert client.call(f"{FNS}:rank", timeout=30) == [0, 1, 2, 3]


def test_a_rank_that_ignores_cancellation_is_replaced(client: JobClient):
    pids = [r["pid"] for r in client.call(f"{FNS}:whoami", timeout=30)]
    with pytest.raises(CallTimeout) as info:
        client.call(f"{FNS}:stuck_on", 1, 60.0, timeout=1.5)
    assert info.value.pending_ranks == (1,)
    after = client.call(f"{FNS}:whoami", timeout=30)
    assert [r["rank"] for r in after] == [0, 1, 2, 3]
    assert after[1]["pid"] != pids[1] and after[1]["calls"] == 1
    assert [after[i]["pid"] for i in (0, 2, 3)] == [pids[i] for i in (0, 2, 3)]


def test_a_crashing_process_is_reported_and_replaced(client: JobClient):
    with pytest.raises(RemoteError) as info:
        client.call(f"{FNS}:exit_on", 0, 3, timeout=30)
    assert (info.value.rank, info.value.exc_type) == (0, "ProcessExited")
    assert "exited with code 3" in info.value.message
    assert client.call(f"{FNS}:rank", timeout=30) == [0, 1, 2, 3]


@pytest.mark.parametrize(("fn", "exc_type", "fragment"), [
    (f"{FNS}:unserialisable", "TypeError", "the result is a builtins.set, which JSON cannot carry"),
    (f"{FNS}:no_such_function", "AttributeError", "no_such_function"),
    ("no_such_module_at_all:f", "ModuleNotFoundError", "no_such_module_at_all"),
])
def test_functions_that_cannot_run_or_answer_are_remote_errors(client: JobClient, fn: str, exc_type: str,
                                                               fragment: str):
    with pytest.raises(RemoteError) as info:
        client.call(fn, timeout=30)
    assert info.value.exc_type == exc_type and fragment in info.value.message


@pytest.mark.parametrize("path", [contract.ROUTE_CALL, contract.ROUTE_EXEC])
@pytest.mark.parametrize("token", [None, "wrong-token", ""])
def test_calls_without_the_job_token_get_401(job: LocalJob, path: str, token: str | None):
    body = json.dumps({"fn": f"{FNS}:rank"}).encode()
    status, answer = raw(job, "POST", path, body, token)
    assert status == 401 and "token" in answer["error"]


def test_the_client_with_a_wrong_token_raises_unauthorized(job: LocalJob):
    with JobClient(job.url, "not-the-token") as bad, pytest.raises(Unauthorized):
        bad.call(f"{FNS}:rank", timeout=30)


@pytest.mark.parametrize(("body", "fragment"), [
    (b"{not json", "not valid JSON"),
    (b"[1, 2]", "must be a JSON object"),
    (json.dumps({"fn": "missing_colon"}).encode(), "module:qualname"),
    (json.dumps({"fn": f"{FNS}:rank", "workers": [5]}).encode(), "node ranks go from 0 to 1"),
])
def test_malformed_calls_get_400_with_the_reason(job: LocalJob, body: bytes, fragment: str):
    status, answer = raw(job, "POST", contract.ROUTE_CALL, body, job.token)
    assert status == 400 and fragment in answer["error"]


def test_an_oversized_call_gets_413_before_it_is_read(job: LocalJob):
    url = urlsplit(job.url)
    with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
        sock.sendall(f"POST /call HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {job.token}\r\n"
                     f"Content-Length: {contract.MAX_BODY_BYTES + 1}\r\n\r\n{{".encode())
        assert sock.makefile("rb").readline().split()[1] == b"413"


def test_pickle_is_refused_when_the_deployment_did_not_opt_in(job: LocalJob):
    with JobClient(job.url, job.token, serialization="pickle") as pickling, pytest.raises(TransportError) as info:
        pickling.call(f"{FNS}:echo", {1, 2}, timeout=30)
    assert info.value.status == 415 and "TRAINPLANE_ALLOW_PICKLE" in str(info.value)


def test_after_an_elastic_shrink_calls_answer_from_the_renumbered_ranks():
    spec = LocalJobSpec(workers=3, num_proc=1, mode="service", master_port=0, grace_period=GRACE, min_workers=2,
                        pythonpath=(str(ROOT),), job_name="service-elastic")
    with serving(spec, ready_timeout=60) as job, JobClient(job.url, job.token) as client:
        assert client.call(f"{FNS}:rank", timeout=60) == [0, 1, 2]
        before = client.members().generation
        job.agents[1].kill()
        assert wait_until(lambda: client.members().generation == before + 1, timeout=30)
        assert wait_until(lambda: client.info().status == "running", timeout=30)
        assert client.call(f"{FNS}:rank", timeout=30) == [0, 1], "node 2's process is rank 1 now, and answers"
