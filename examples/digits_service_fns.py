"""Remote functions of ``examples/service_digits.py``; they run inside a service job's processes.

The process group and the training state live outside this module, in ``runtime.distributed``, so
they survive both an edit of this file (hot reload imports it again, its globals empty) and a
resize of the job:

* ``distributed.process_group()`` is the job's default group: formed by the first call, the same
  for every later call of the same world, destroyed and formed again for a new world (after a
  resize), against the new ``MASTER_ADDR``/``MASTER_PORT``;
* ``distributed.kept("digits")`` is this process's training state (model, optimiser, epochs done);
* when the group is new (``group.fresh``), the model is wrapped in a new ``DistributedDataParallel``,
  whose constructor broadcasts rank 0's parameters and buffers to every rank, so a rank that joined
  with a resize continues from the trained model; the momentum buffers and the epoch count are
  broadcast from rank 0 the same way.

The data, model and fingerprint come from ``ddp_digits.py`` (the batch-mode example), so both
examples train the same thing. torch, scikit-learn and ``ddp_digits`` are imported inside the
functions, where they run: the driver imports this module only to name the functions, so it needs
no more than the client (``runtime.workflow`` and httpx).
"""

from __future__ import annotations

import os
from typing import Any

from runtime import distributed


def _setup(lr: float, batch_size: int, seed: int) -> dict[str, Any]:
    """This process's training state on the current world's group: built on the first call,
    carried over (from rank 0) to a new world, reused otherwise."""
    group = distributed.process_group()
    state = distributed.kept("digits")
    if state.get("generation") == group.generation:
        return state
    import torch
    import torch.distributed as dist
    from ddp_digits import datasets, model
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    cuda = group.backend == "nccl"
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
    if "module" not in state:
        torch.manual_seed(seed)
        state["module"] = model().to(device)
        state["opt"] = torch.optim.SGD(state["module"].parameters(), lr=lr, momentum=0.9)
        state["epoch"] = 0
        state["train"], state["test"] = datasets(seed)
    net = DistributedDataParallel(state["module"], device_ids=[device.index] if cuda else None)
    for p in state["module"].parameters():  # momentum as rank 0 has it (zeros on a new rank first)
        dist.broadcast(state["opt"].state[p].setdefault("momentum_buffer", torch.zeros_like(p)), 0)
    epoch = torch.tensor([state["epoch"]], device=device)
    dist.broadcast(epoch, 0)
    sampler = DistributedSampler(state["train"], num_replicas=group.world_size, rank=group.rank, shuffle=True,
                                 seed=seed)
    state.update(generation=group.generation, device=device, net=net, sampler=sampler, epoch=int(epoch.item()),
                 loader=DataLoader(state["train"], batch_size=batch_size, sampler=sampler))
    return state


def train(epochs: int = 1, lr: float = 0.05, batch_size: int = 32, seed: int = 0) -> dict[str, Any]:
    """Train ``epochs`` more epochs with DDP; returns this rank's view (loss averaged over all ranks)."""
    import torch
    import torch.distributed as dist
    from ddp_digits import train_epoch

    state = _setup(lr, batch_size, seed)
    net, opt, device = state["net"], state["opt"], state["device"]
    net.train()
    total = torch.zeros(2, device=device)
    for _ in range(epochs):
        state["sampler"].set_epoch(state["epoch"])
        total = train_epoch(net, state["loader"], opt, device)
        dist.all_reduce(total)
        state["epoch"] += 1
    return {"rank": dist.get_rank(), "world_size": dist.get_world_size(), "epoch": state["epoch"],
            "loss": total[0].item() / total[1].item(), "pid": os.getpid()}


def evaluate() -> dict[str, Any]:
    """Held-out accuracy of the model trained so far, and a fingerprint of its parameters."""
    group = distributed.process_group()
    state = distributed.kept("digits")
    if "net" not in state:
        raise RuntimeError("evaluate() before train(): this process has no model yet")
    import torch
    from ddp_digits import fingerprint

    net, device = state["net"], state["device"]
    net.eval()
    with torch.no_grad():
        x_test, y_test = state["test"].tensors
        accuracy = (net.module(x_test.to(device)).argmax(1).cpu() == y_test).float().mean().item()
    return {"rank": group.rank, "epoch": state["epoch"], "accuracy": accuracy,
            "params": fingerprint(net.module), "pid": os.getpid()}
