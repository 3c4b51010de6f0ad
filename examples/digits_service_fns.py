"""Remote functions of ``examples/service_digits.py``; they run inside a service job's processes.

State lives in module globals of the long-lived worker processes, so it survives between calls: the
process group is initialised by the first call, the model and optimiser are built once, and each
``train`` call continues where the previous one stopped. The data, model and fingerprint come from
``ddp_digits.py`` (the batch-mode example), so both examples train the same thing.

torch, scikit-learn and ``ddp_digits`` are imported inside the functions, where they run: the
driver imports this module only to name the functions, so it needs no more than the client
(``runtime.workflow`` and httpx).
"""

from __future__ import annotations

import os
from typing import Any

_STATE: dict[str, Any] = {}
"""This process's training state: process group, model, optimiser, data, epochs done."""


def _setup(lr: float, batch_size: int, seed: int) -> dict[str, Any]:
    """Initialise the process group and build the model on the first call; reuse them afterwards."""
    if _STATE:
        return _STATE
    import torch
    import torch.distributed as dist
    from ddp_digits import datasets, model
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
    torch.manual_seed(seed)
    train_set, test_set = datasets(seed)
    sampler = DistributedSampler(train_set, num_replicas=dist.get_world_size(), rank=dist.get_rank(), shuffle=True,
                                 seed=seed)
    net = DistributedDataParallel(model().to(device), device_ids=[device.index] if cuda else None)
    _STATE.update(
        device=device, sampler=sampler, test=test_set, net=net, epoch=0,
        loader=DataLoader(train_set, batch_size=batch_size, sampler=sampler),
        opt=torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9),
    )
    return _STATE


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
    return {"rank": dist.get_rank(), "epoch": state["epoch"], "loss": total[0].item() / total[1].item(),
            "pid": os.getpid()}


def evaluate() -> dict[str, Any]:
    """Held-out accuracy of the model trained so far, and a fingerprint of its parameters."""
    if not _STATE:
        raise RuntimeError("evaluate() before train(): this process has no model yet")
    import torch
    import torch.distributed as dist
    from ddp_digits import fingerprint

    net, device = _STATE["net"], _STATE["device"]
    net.eval()
    with torch.no_grad():
        x_test, y_test = _STATE["test"].tensors
        accuracy = (net.module(x_test.to(device)).argmax(1).cpu() == y_test).float().mean().item()
    return {"rank": dist.get_rank(), "epoch": _STATE["epoch"], "accuracy": accuracy,
            "params": fingerprint(net.module), "pid": os.getpid()}
