"""Training throughput under the launcher: DDP steps/s of one small model, trainplane against torchrun.

The workload: an MLP (64 -> 256 -> 256 -> 10) trained with DDP over gloo on a fixed synthetic set
(seeded), each rank on its own shard, batches of 64; 20 warm-up steps, then ``--steps`` timed steps
between two barriers. Rank 0 reports steps/s of the timed part (start-up is ``bench/launch.py``'s),
and the CPU time its node's agent and that agent's parent (the launcher) used meanwhile.

Shapes (nodes x processes per node) 2 x 2 and 1 x 2, each under
  (a) ``python -m runtime launch --nnodes N --nproc-per-node P`` (this project),
  (b) torchrun of the same shape: N ``torchrun`` agents, c10d rendezvous on 127.0.0.1,
with ``OMP_NUM_THREADS`` unset for both (each applies its own rule). Runs alternate (a, b, then b, a
on the next round) in this one process tree, so both sides see the same machine load; the load
average is printed with every run, and beside the ratio of the medians, the median of each round's
own ratio (its two runs ran back to back, under nearly the same load).

Last line: ``train ratio_vs_torchrun=<worse shape's median(a)/median(b)> 2x2=<ratio> 1x2=<ratio>``,
steps/s of trainplane over torchrun's. Target (DESIGN.md): >= 0.98. ``--quick``: one round of
50 timed steps (a check that it runs, in about a minute on an idle machine; one sample per side).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as `python bench/train.py`
from runtime.local.launch_plan import free_port
from testbed.agents import project_env

WORKLOAD = """
import gc, json, os, sys, time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

steps, out = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
data = torch.Generator().manual_seed(1234)
x = torch.randn(8192, 64, generator=data)
y = torch.randint(0, 10, (8192,), generator=data)
x, y = x[rank::world], y[rank::world]
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
                          torch.nn.Linear(256, 10))
model = DistributedDataParallel(net)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
loss_fn = torch.nn.CrossEntropyLoss()

def launcher_cpu():
    # CPU seconds so far of this process's agent and the agent's parent (the launcher; for
    # torchrun, the benchmark waiting on it), from /proc.
    total, pid = 0.0, os.getppid()
    for _ in range(2):
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(") ", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        pid = int(fields[1])
    return total

def step(i):
    start = (i * 64) % (len(x) - 64)
    optimizer.zero_grad()
    loss = loss_fn(model(x[start:start + 64]), y[start:start + 64])
    loss.backward()
    optimizer.step()
    return loss

for i in range(20):
    step(i)
dist.barrier()
begin, cpu = time.perf_counter(), launcher_cpu()
for i in range(steps):
    loss = step(i)
dist.barrier()
elapsed, cpu = time.perf_counter() - begin, launcher_cpu() - cpu
if rank == 0:
    with open(out, "w") as f:
        json.dump({"steps_per_s": steps / elapsed, "threads": torch.get_num_threads(), "launcher_cpu_s": cpu,
                   "omp": os.environ.get("OMP_NUM_THREADS"), "loss": float(loss)}, f)
dist.destroy_process_group()
# Free the DDP model (a reference cycle) now, under torchrun too, not in the interpreter's finalization, where the
# gloo group's threads can no longer take the GIL (runtime/agent/execution/bootstrap.py, collect_before_exit).
del model, optimizer
gc.collect()
"""
SHAPES = ((2, 2), (1, 2))
"""(nodes, processes per node) measured."""


def bench_env() -> dict[str, str]:
    """The launching environment: the project on PYTHONPATH, ``OMP_NUM_THREADS`` left to the launcher."""
    return {k: v for k, v in project_env().items() if k != "OMP_NUM_THREADS"}


def run_ours(shape: tuple[int, int], cmd: list[str]) -> None:
    """(a) this launcher."""
    nodes, nproc = shape
    subprocess.run([sys.executable, "-m", "runtime", "launch", "--nnodes", str(nodes), "--nproc-per-node", str(nproc),
                    "--master-port", "0", *cmd], check=True, env=bench_env(), stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def run_torchrun(shape: tuple[int, int], cmd: list[str]) -> None:
    """(b) torchrun: one agent per node, c10d rendezvous, node 0 hosting the store."""
    nodes, nproc = shape
    port = free_port("127.0.0.1")
    common = ["--nnodes", str(nodes), "--nproc-per-node", str(nproc), "--rdzv-backend", "c10d",
              "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"bench{port}"]
    procs = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", *common, "--rdzv-conf",
                               f"is_host={i == 0}", *cmd], env=bench_env(), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for i in range(nodes)]
    if any(p.wait() != 0 for p in procs):
        raise RuntimeError("torchrun failed")


def measure(runner: str, shape: tuple[int, int], script: str, steps: int, tmp: str) -> dict[str, float]:
    """One run: rank 0's report (steps/s, torch threads, OMP_NUM_THREADS)."""
    out = os.path.join(tmp, "report.json")
    (run_ours if runner == "trainplane" else run_torchrun)(shape, [script, str(steps), out])
    with open(out) as f:
        return json.load(f)


def main() -> None:
    """Alternate the launchers per shape, print every run, the medians and the ratios."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=9, help="runs of each launcher per shape; default 9")
    p.add_argument("--steps", type=int, default=300, help="timed steps per run; default 300")
    p.add_argument("--quick", action="store_true", help="one round of 50 timed steps")
    args = p.parse_args()
    if args.quick:
        args.runs, args.steps = 1, 50
    rates: dict[tuple[str, tuple[int, int]], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "ddp_mlp.py")
        Path(script).write_text(WORKLOAD)
        for i in range(args.runs):
            for shape in SHAPES:
                order = ("trainplane", "torchrun") if i % 2 == 0 else ("torchrun", "trainplane")
                for runner in order:
                    report = measure(runner, shape, script, args.steps, tmp)
                    rates.setdefault((runner, shape), []).append(report["steps_per_s"])
                    print(f"round {i + 1}/{args.runs} {shape[0]}x{shape[1]} {runner:>10}: "
                          f"{report['steps_per_s']:.1f} steps/s (torch threads {report['threads']}, "
                          f"OMP_NUM_THREADS={report['omp']}, node 0's agent and its parent "
                          f"{report['launcher_cpu_s']:.2f} CPU s while timed, load {os.getloadavg()[0]:.2f})",
                          flush=True)
    ratios = {}
    for shape in SHAPES:
        ours, theirs = (statistics.median(rates[(r, shape)]) for r in ("trainplane", "torchrun"))
        ratios[shape] = ours / theirs
        paired = statistics.median(a / b for a, b in zip(rates[("trainplane", shape)], rates[("torchrun", shape)]))
        print(f"{shape[0]}x{shape[1]}: trainplane median {ours:.1f} steps/s, torchrun median {theirs:.1f} steps/s, "
              f"ratio {ratios[shape]:.3f} (median of the rounds' own ratios {paired:.3f})")
    print(f"train ratio_vs_torchrun={min(ratios.values()):.3f} "
          + " ".join(f"{n}x{p}={r:.3f}" for (n, p), r in ratios.items()))


if __name__ == "__main__":
    main()
