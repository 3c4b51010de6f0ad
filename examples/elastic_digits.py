"""Elastic DDP on scikit-learn's digits: survives nodes leaving and joining mid-training.

Run it as an elastic job, e.g.::

    python -m runtime launch --workers 3 --num-proc 1 --min-workers 2 examples/elastic_digits.py

Rank 0 checkpoints after every epoch (atomically, to a path every node can read). When the world
changes, the agent raises ``runtime.WorkerMembershipChanged`` in every process with ``os.environ``
already describing the new world; this script then drops its process group, re-initialises it with
the new WORLD_SIZE/RANK/MASTER_ADDR, reloads the last checkpoint and carries on. A collective that
fails first (a peer vanished mid all-reduce) is handled the same way once the agent confirms the
change (``runtime.membership.wait``).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
from pathlib import Path
from typing import Optional

import torch
import torch.distributed as dist
from ddp_digits import datasets, fingerprint, model, train_epoch  # the sibling example: same data and model
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

import runtime

CHANGE_WAIT = 15.0
"""Seconds to wait for the agent's account of a change after a collective failed."""


def parse_args() -> argparse.Namespace:
    """Command line of the example."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=32, help="per-rank batch size")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--checkpoint", default=None,
                   help="checkpoint path; default checkpoints/elastic_digits-<job id>.pt, so each launch starts "
                        "fresh and every generation of one job resumes from it")
    p.add_argument("--result", default=None, help="rank 0 writes the final accuracy and world size here (JSON)")
    p.add_argument("--collective-timeout", type=float, default=20.0, help="seconds before a stuck collective fails")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def load(path: Path, net: nn.Module, opt: torch.optim.Optimizer) -> int:
    """Restore model and optimizer from ``path`` if it exists; return the next epoch to run."""
    if not path.exists():
        return 0
    state = torch.load(path, weights_only=True)
    net.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    return int(state["epoch"])


def save(path: Path, net: nn.Module, opt: torch.optim.Optimizer, epoch: int) -> None:
    """Write a checkpoint atomically (rename), so a reader never sees half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save({"model": net.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch}, tmp)
    os.replace(tmp, path)


def train(args: argparse.Namespace) -> Optional[float]:
    """Train in the current world from the last checkpoint; rank 0 returns held-out accuracy."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.collective_timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    train_set, test_set = datasets(args.seed)
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9)
    ckpt = Path(args.checkpoint or f"checkpoints/elastic_digits-{os.environ.get('TORCHELASTIC_RUN_ID', 'local')}.pt")
    start = load(ckpt, net, opt)
    ddp = DistributedDataParallel(net)
    sampler = DistributedSampler(train_set, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)
    if rank == 0:
        print(f"generation {os.environ['TRAINPLANE_GENERATION']}: world size {world}, from epoch {start}", flush=True)
    for epoch in range(start, args.epochs):
        sampler.set_epoch(epoch)
        total = train_epoch(ddp, loader, opt, torch.device("cpu"))
        dist.all_reduce(total)
        if rank == 0:
            save(ckpt, net, opt, epoch + 1)
            print(f"epoch {epoch + 1}/{args.epochs} loss {total[0].item() / total[1].item():.4f} "
                  f"(world size {world})", flush=True)
        dist.barrier()
    if rank != 0:
        return None
    with torch.no_grad():
        x_test, y_test = test_set.tensors
        accuracy = (net(x_test).argmax(1) == y_test).float().mean().item()
    if args.result:
        Path(args.result).write_text(json.dumps({"accuracy": accuracy, "world_size": world,
                                                 "params": fingerprint(net)}))
    return accuracy


def drop_process_group() -> None:
    """Forget the broken process group so a new one can be initialised.

    The collection frees what the failed generation's frames still held, so rank 0's old TCPStore
    releases MASTER_PORT before the new one binds it.
    """
    if dist.is_initialized():
        dist.destroy_process_group()
    gc.collect()


def main() -> None:
    """Train to the end, re-forming the process group on every membership change."""
    args = parse_args()
    while True:
        generation = runtime.membership.generation()
        try:
            drop_process_group()
            accuracy = train(args)
            break
        except runtime.WorkerMembershipChanged as change:
            print(f"rank {os.environ['RANK']}: {change}", flush=True)
        except RuntimeError as error:
            change = runtime.membership.wait(CHANGE_WAIT, since=generation)
            if change is None:
                raise
            print(f"rank {os.environ['RANK']}: collective failed ({str(error).splitlines()[0]}); {change}", flush=True)
    if accuracy is not None:
        print(f"held-out accuracy {accuracy:.4f} (world size {dist.get_world_size()})", flush=True)
    drop_process_group()


if __name__ == "__main__":
    main()
