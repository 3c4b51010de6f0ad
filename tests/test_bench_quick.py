"""Every benchmark in bench/ runs to its last line: each one's ``--quick`` mode, as a user runs it.

A benchmark that stops half-way measures nothing (bench/membership.py did, once elastic failure
budgets failed its crash trial: issue 26), so each runs here end to end and its last line must have
the form bench/README.md documents. The numbers are not judged: timing belongs to the benchmarks.
Sizes are the smallest that still take every path of a benchmark (fan-out at 8 and 64 nodes, the
membership load point at 16).
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT, project_env

pytestmark = pytest.mark.process

NUMBER = r"(\d+(\.\d+)?|nan)"
MEASURED = r"\d+(\.\d+)?"
"""A figure that must have been measured: membership prints ``nan`` for a load point its lightweight hosts could not
settle, which at 16 nodes means they are broken."""

BENCHES = {
    "membership": (["--quick", "--nodes", "16"],
                   rf"membership crash_ms={NUMBER} kill_ms={NUMBER} stop_ms={NUMBER} load_rps_per_node_16={MEASURED}"),
    "fanout": (["--quick", "--nodes", "8,64"],
               rf"fanout nodes=64 tree_p50_ms={NUMBER} flat_p50_ms={NUMBER} bare_p50_ms={NUMBER} "
               rf"ratio_vs_bare={NUMBER} coordinator_requests=\d+"),
    "launch": (["--quick"], rf"launch ratio_vs_torchrun={NUMBER} ratio_vs_direct={NUMBER}"),
    "train": (["--quick"], rf"train ratio_vs_torchrun={NUMBER} 2x2={NUMBER} 1x2={NUMBER}"),
    "iterate": (["--quick"], rf"iterate\[ddp\] edit_to_result_ms={NUMBER} cold_start_ms={NUMBER}"),
    "cancel": (["--quick"], rf"cancel timeout_p50_s={NUMBER} cut_p50_s={NUMBER} killed_p50_s={NUMBER} "
                            rf"cut_ratio={NUMBER} killed_ratio={NUMBER}"),
    "relay": (["--quick"], rf"relay direct_p50_ms={NUMBER} relay_p50_ms={NUMBER} portforward_p50_ms={NUMBER} "
                           rf"relay_ratio={NUMBER} portforward_ratio={NUMBER}"),
}
"""Each benchmark's arguments and the form of its last line."""


def test_every_benchmark_is_here():
    scripts = {p.stem for p in (ROOT / "bench").glob("*.py")} - {"__init__", "recorder"}
    assert scripts == set(BENCHES), "a benchmark without a --quick run here, or one gone"


@pytest.mark.parametrize("name", sorted(BENCHES))
def test_a_benchmarks_quick_mode_runs_to_its_last_line(name: str):
    args, last = BENCHES[name]
    done = subprocess.run([sys.executable, str(ROOT / "bench" / f"{name}.py"), *args], cwd=ROOT, env=project_env(),
                          capture_output=True, text=True, timeout=300)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines, f"{done.stdout}\n{done.stderr}"
    assert re.fullmatch(last, lines[-1]), f"{done.stdout}\n{done.stderr}"
    if name == "fanout":
        assert any(re.fullmatch(rf"model separate_hosts nodes=1000 flat_ms={NUMBER} tree_ms={NUMBER} "
                                rf"bare_ms>={NUMBER} ratio_vs_bare<={NUMBER}", line) for line in lines), done.stdout
    if name == "iterate":
        assert any(re.fullmatch(rf"iterate\[plain\] edit_to_result_ms={NUMBER} cold_start_ms={NUMBER}", line)
                   for line in lines), done.stdout
