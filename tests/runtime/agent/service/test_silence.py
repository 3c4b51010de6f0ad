"""A service call's hang report: once some ranks answered, the ranks still out are named to the
caller (and the coordinator's log) every ``hang_report_after`` seconds. The decisions with a fake
clock; then a real 2-node job whose rank 1 waits for the test, which lets it go once it has read
the report in the call's output."""

from __future__ import annotations

import importlib
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from runtime.agent.service.silence import SilenceReport
from runtime.local.jobs import LocalJobSpec
from runtime.workflow import ExistingCompute, fn
from testbed.jobs import serving
from tests.conftest import wait_until

pytestmark = pytest.mark.process

WAITER = '''
import os
import time


def answer(release):
    if os.environ["RANK"] == "1":
        while not os.path.exists(release):
            time.sleep(0.05)
    return int(os.environ["RANK"])
'''


def test_nothing_is_reported_before_a_first_answer_and_then_every_period():
    report = SilenceReport("m:f", [0, 1, 2], every=60)
    assert report.wait(0) == 60 and report.report([], 100) is None, "nobody answered: no report"
    report.answered(10)
    assert report.report([0], 69) is None and report.wait(69) == 1
    assert report.report([0], 70) == ("trainplane: call m:f: rank(s) 0 answered; waiting for rank(s) 1, 2, "
                                      "silent for 60 s since the first answer")
    assert report.report([0, 1], 100) is None and report.wait(100) == 30, "once per period"
    assert report.report([0, 1], 130).endswith("waiting for rank(s) 2, silent for 120 s since the first answer")
    assert report.report([0, 1, 2], 500) is None, "everybody answered"


def test_a_call_with_a_silent_rank_names_it_to_the_caller(tmp_path: Path, capfd):
    root = tmp_path / "src"
    root.mkdir()
    (root / "waiter.py").write_text(textwrap.dedent(WAITER))
    sys.path.insert(0, str(root))
    release = tmp_path / "release"
    spec = LocalJobSpec(workers=2, num_proc=1, mode="service", master_port=0, grace_period=1.0,
                        hang_report_after=1.0, log_dir=str(tmp_path / "logs"))
    try:
        waiter = importlib.import_module("waiter")
        with serving(spec, ready_timeout=120) as job:
            remote = fn(waiter.answer).to(ExistingCompute(job.url, job.token)).options(timeout=120)
            results: list = []
            caller = threading.Thread(target=lambda: results.append(remote(str(release))))
            caller.start()
            seen: list[str] = []
            # The agent's log says it too (``[trainplane node 0] ...``), often first: wait for the caller's line.
            expected = "[rank 1] trainplane: call waiter:answer: rank(s) 0 answered; waiting for rank(s) 1"

            def reported() -> bool:
                seen.append(capfd.readouterr().err)
                return expected in "".join(seen)

            assert wait_until(reported, timeout=60), "".join(seen)
            release.touch()
            caller.join(60)
            assert results == [[0, 1]]
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("waiter", None)
