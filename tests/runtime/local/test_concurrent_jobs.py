"""Local jobs side by side: ports reserved across processes, so jobs started together never collide."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

from runtime.local import launch_plan, reservation
from tests.conftest import ROOT, project_env

pytestmark = pytest.mark.process

ALL_REDUCE = """
import sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
value = torch.tensor([float(sys.argv[1]) * (dist.get_rank() + 1)])
dist.all_reduce(value)
expected = float(sys.argv[1]) * sum(range(1, dist.get_world_size() + 1))
assert value.item() == expected, f"all-reduce gave {value.item()}, expected {expected}: another job's ranks joined"
print("sum", value.item(), flush=True)
dist.destroy_process_group()
"""

HOLD = """
import sys, time
from runtime.local import reservation
held = reservation.reserve([int(p) for p in sys.argv[2:]], sys.argv[1])
print("held" if held else "refused", flush=True)
time.sleep(60)
"""


def test_two_launches_at_the_same_instant_with_default_flags_both_all_reduce(tmp_path: Path):
    """Both jobs take every port by default (the launcher's old default was 29500 for both, and a rank
    of one job could join the other's TCPStore); each job's sum is its own (a factor per job), so a
    merged world fails its assertion."""
    path = tmp_path / "allreduce.py"
    path.write_text(ALL_REDUCE)
    jobs = [subprocess.Popen([sys.executable, "-m", "runtime", "launch", "--nnodes", "2", "--nproc-per-node", "2",
                              str(path), str(factor)],
                             cwd=ROOT, env=project_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for factor in (1, 100)]
    outputs = [job.communicate(timeout=240) for job in jobs]
    for job, (out, err), factor in zip(jobs, outputs, (1, 100)):
        assert job.returncode == 0, err
        assert f"sum {float(factor * 10)}" in out


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """Start a process that reserves ports in ``tmp_path``'s lock directory and keeps them."""
    started: list[subprocess.Popen[str]] = []

    def hold(*ports: int) -> str:
        proc = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path), *map(str, ports)], cwd=ROOT,
                                env=project_env(), stdout=subprocess.PIPE, text=True)
        started.append(proc)
        return proc.stdout.readline().strip()

    yield hold
    for proc in started:
        proc.kill()
        proc.wait()


def test_a_reservation_holds_against_another_process_until_it_exits(tmp_path: Path, holder):
    assert holder(41000, 41001) == "held"
    assert reservation.reserve([41001, 41002], str(tmp_path)) is None
    mine = reservation.reserve([41002], str(tmp_path))
    assert mine is not None, "a refused reservation keeps none of its ports"
    assert holder(41002) == "refused"
    mine.release()
    assert holder(41002) == "held"


def test_the_plan_skips_ports_another_job_reserved(tmp_path: Path, holder, monkeypatch: pytest.MonkeyPatch):
    picks = iter([39990, 40000, 39991, 41000])  # agent port, base port; then again
    monkeypatch.setattr(launch_plan, "loopback_range_usable", lambda: False)
    monkeypatch.setattr(launch_plan, "free_port", lambda _host, _avoid=(), size=1: next(picks))
    assert holder(40050) == "held"  # inside the first pick's block, 40000..40065
    lp = launch_plan.plan(workers=1, master_port=0, lock_dir=str(tmp_path))
    assert (lp.ports, lp.master_port) == ((39991,), 41000)
    assert holder(41000) == "refused" and holder(39991) == "refused"
    lp.reservation.release()
    assert holder(41000) == "held"


def test_an_explicit_base_port_another_job_reserved_is_refused_naming_the_flag(tmp_path: Path, holder):
    assert holder(42005) == "held"
    with pytest.raises(RuntimeError, match=r"--master-port: ports 42000\.\.42065 are reserved by another job"):
        launch_plan.plan(workers=1, master_port=42000, num_proc=2, lock_dir=str(tmp_path))
