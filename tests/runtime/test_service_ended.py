"""After a service job has ended, every call raises one typed error carrying why (``JobEnded``), and
``info()`` says so: through the local launcher's job and through a client that only has the URL.
It used to be ``NodeFailed`` once, then ``TransportError ... Connection refused`` forever."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from runtime.agent.errors import JobEnded, TransportError
from runtime.client import JobClient
from runtime.local.jobs import LocalJobSpec
from testbed.jobs import serving
from tests.conftest import ROOT, wait_until

pytestmark = pytest.mark.process

FNS = "testbed.service_fns"


def test_a_node_lost_mid_call_ends_a_fixed_size_job_and_every_later_call_says_why(tmp_path: Path):
    spec = LocalJobSpec(workers=2, num_proc=1, mode="service", master_port=0, grace_period=2.0,
                        pythonpath=(str(ROOT),), job_name="ended")
    with serving(spec, ready_timeout=60) as job, JobClient(job.url, job.token) as client:
        marker = tmp_path / "running"
        raised: list[BaseException] = []

        def call() -> None:
            try:
                client.call(f"{FNS}:mark_then_sleep", str(marker), 60.0, timeout=60)
            except BaseException as exc:
                raised.append(exc)

        caller = threading.Thread(target=call)
        caller.start()
        assert wait_until(marker.exists, timeout=30)
        job.agents[1].kill()
        caller.join(timeout=60)
        [first] = raised
        assert isinstance(first, JobEnded), repr(first)
        assert first.status == "failed" and "node 1" in first.reason
        for _ in range(2):
            with pytest.raises(JobEnded) as later:
                client.call(f"{FNS}:rank", timeout=10)
            assert later.value.reason == first.reason
        assert client.info().status == "failed" and client.info().reason == first.reason
        with JobClient(job.url, job.token) as by_url:  # a client that only has the URL, while the coordinator tells
            with pytest.raises(JobEnded) as fresh:
                by_url.call(f"{FNS}:rank", timeout=10)
            assert fresh.value.reason == first.reason and by_url.info().reason == first.reason
        assert wait_until(lambda: not job.running(), timeout=60)
        with pytest.raises(JobEnded):
            client.call(f"{FNS}:rank", timeout=10)
        assert client.info().status == "failed", "the verdict is remembered once nobody answers"
        with JobClient(job.url, job.token) as stranger, pytest.raises(TransportError):
            stranger.info()
