"""Launch overhead: start -> every rank has finished one all-reduce, 2 nodes x 2 processes, one machine.

Measured alternately in one run, so machine noise hits all three alike:
  (a) ``python -m runtime launch --workers 2 --num-proc 2`` (this project),
  (b) two ``torchrun`` agents with c10d rendezvous on 127.0.0.1 (what a user would pick instead),
  (c) the lower bound: the 4 processes started directly with their environment preset.

Last line: ``launch ratio_vs_torchrun=<a/b median> ratio_vs_direct=<a/c median>``. ``--quick``: one
run of each and no page-cache warm-up run (a check that it runs; its ratios are one sample).
Targets: ratio_vs_torchrun <= 0.75; ratio_vs_direct <= 1.15 (DESIGN.md), <= 1.03 on a quiet machine (issue 26).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as `python bench/launch.py`
from runtime.local.launch_plan import free_port
from testbed.agents import project_env

WORKLOAD = """
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
assert t.item() == dist.get_world_size()
dist.destroy_process_group()
"""


def run_ours(script: str) -> None:
    """(a) this launcher."""
    subprocess.run(
        [sys.executable, "-m", "runtime", "launch", "--workers", "2", "--num-proc", "2", "--master-port", "0", script],
        check=True, env=project_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def run_torchrun(script: str) -> None:
    """(b) two torchrun agents, c10d rendezvous, node 0 hosting the store."""
    port = free_port("127.0.0.1")
    common = ["--nnodes", "2", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
              "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"bench{port}"]
    procs = [
        subprocess.Popen([sys.executable, "-m", "torch.distributed.run", *common, "--rdzv-conf", f"is_host={i == 0}",
                          script], env=project_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for i in range(2)
    ]
    for p in procs:
        if p.wait() != 0:
            raise RuntimeError("torchrun failed")


def run_direct(script: str) -> None:
    """(c) the four processes with their environment preset: no launcher at all."""
    port = free_port("127.0.0.1")
    procs = []
    for rank in range(4):
        e = project_env()
        e.update(WORLD_SIZE="4", RANK=str(rank), LOCAL_RANK=str(rank % 2), LOCAL_WORLD_SIZE="2",
                 MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, script], env=e))
    for p in procs:
        if p.wait() != 0:
            raise RuntimeError("direct run failed")


def timed(fn: Callable[[str], None], script: str) -> float:
    """Wall seconds of one run."""
    start = time.perf_counter()
    fn(script)
    return time.perf_counter() - start


def main() -> None:
    """Alternate the three runners, print min/median of each and the ratios."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=7, help="runs of each; default 7")
    p.add_argument("--quick", action="store_true", help="one run of each")
    args = p.parse_args()
    if args.quick:
        args.runs = 1
    runners = {"trainplane": run_ours, "torchrun": run_torchrun, "direct": run_direct}
    times: dict[str, list[float]] = {k: [] for k in runners}
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "allreduce.py")
        Path(script).write_text(WORKLOAD)
        if not args.quick:
            timed(run_direct, script)  # warm the page cache for torch's import
        for i in range(args.runs):
            for name, fn in runners.items():
                times[name].append(timed(fn, script))
            print(f"run {i + 1}/{args.runs}: " + " ".join(f"{k}={v[-1]:.2f}s" for k, v in times.items())
                  + f" (load average {os.getloadavg()[0]:.2f})", flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in times.items():
        print(f"{k:>10}: min {min(v):.2f} s  median {med[k]:.2f} s")
    print(f"launch ratio_vs_torchrun={med['trainplane'] / med['torchrun']:.3f} "
          f"ratio_vs_direct={med['trainplane'] / med['direct']:.3f}")


if __name__ == "__main__":
    main()
