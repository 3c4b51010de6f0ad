"""DistributedDataParallel on scikit-learn's bundled digits (8x8 images, 10 classes, 1,797 samples).

Run it under any launcher that sets the torchrun environment (WORLD_SIZE, RANK, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT), e.g.::

    python -m runtime launch --workers 2 --num-proc 2 examples/ddp_digits.py

gloo on CPU, nccl when CUDA is present. Rank 0 prints the loss per epoch and the held-out accuracy,
and saves a checkpoint. Every rank writes a fingerprint of its final parameters when
``--params-out`` is given, so tests can check that all ranks hold the same model.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def parse_args() -> argparse.Namespace:
    """Command line of the example."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=32, help="per-rank batch size")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--checkpoint", default=str(Path(os.environ.get("CHECKPOINT_DIR", "checkpoints")) / "ddp_digits.pt"),
                   help="where rank 0 saves the model (default: in $CHECKPOINT_DIR, a DistributedJob's checkpoint_dir, "
                        "when it is set, else in ./checkpoints)")
    p.add_argument("--params-out", default=None, help="directory for per-rank parameter fingerprints (JSON)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def datasets(seed: int) -> tuple[TensorDataset, TensorDataset]:
    """Train/held-out split of digits, pixels scaled to [0, 1]; the same split on every rank."""
    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.long)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=seed, stratify=y)
    return TensorDataset(x_train, y_train), TensorDataset(x_test, y_test)


def model() -> nn.Module:
    """A small MLP: 64 -> 128 -> 10."""
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))


def train_epoch(
    net: nn.Module, loader: DataLoader, opt: torch.optim.Optimizer, device: torch.device
) -> torch.Tensor:
    """One pass over ``loader``; returns this rank's ``[summed loss, samples]`` (all-reduce it for the mean)."""
    loss_fn = nn.CrossEntropyLoss()
    total = torch.zeros(2, device=device)
    for xb, yb in loader:
        opt.zero_grad()
        loss = loss_fn(net(xb.to(device)), yb.to(device))
        loss.backward()
        opt.step()
        total += torch.stack([loss.detach() * len(yb), torch.tensor(float(len(yb)), device=device)])
    return total


def fingerprint(module: nn.Module) -> str:
    """SHA-256 of every parameter's bytes, in order."""
    h = hashlib.sha256()
    for p in module.parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def main() -> None:
    """Train, evaluate on rank 0, checkpoint."""
    args = parse_args()
    started = time.perf_counter()
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
    torch.manual_seed(args.seed)
    train, test = datasets(args.seed)
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)
    net = DistributedDataParallel(model().to(device), device_ids=[device.index] if cuda else None)
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        total = train_epoch(net, loader, opt, device)
        dist.all_reduce(total)
        if rank == 0:
            print(f"epoch {epoch + 1}/{args.epochs} loss {total[0].item() / total[1].item():.4f}", flush=True)
    net.eval()
    with torch.no_grad():
        x_test, y_test = test.tensors
        accuracy = (net.module(x_test.to(device)).argmax(1).cpu() == y_test).float().mean().item()
    if args.params_out:
        out = Path(args.params_out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"rank-{rank}.json").write_text(
            json.dumps({"rank": rank, "world_size": world, "params": fingerprint(net.module), "accuracy": accuracy})
        )
    if rank == 0:
        path = Path(args.checkpoint)
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"model": net.module.state_dict(), "epochs": args.epochs, "accuracy": accuracy}, path)
        print(f"held-out accuracy {accuracy:.4f} (world size {world}, "
              f"{time.perf_counter() - started:.1f} s); checkpoint {path}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
