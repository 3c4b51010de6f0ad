"""Stateful DDP in the edit loop, with real gloo DDP in real service jobs: the README's example
(``examples/digits_service_fns.py``, its group and state in ``runtime.distributed``) keeps training
across an edit of its module, an edit of a ``cls`` method and a resize 2 -> 3 -> 2, in the same
processes; Kubetorch's pattern (init at the start of every call, destroy at its end) works call
after call; a group the user's code kept for an older world fails the next call, naming the change.
Each step's time is printed (``-s`` shows it), never asserted."""

from __future__ import annotations

import importlib
import shutil
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import pytest

from runtime import RemoteError
from runtime.workflow import ExistingCompute, LocalCompute, cls, fn
from tests.conftest import ROOT

pytestmark = pytest.mark.process

TRAINER = '''
from digits_service_fns import train


class Trainer:
    def __init__(self, lr):
        self.lr = lr

    def step(self, epochs):
        return train(epochs, lr=self.lr)
'''
KUBETORCH = '''
import os


def torch_ddp(epochs):
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.distributed.init_process_group(backend="gloo")
    rank = torch.distributed.get_rank()
    model = DDP(torch.nn.Linear(10, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(epochs):
        optimizer.zero_grad()
        model(torch.randn(10)).sum().backward()
        optimizer.step()
    torch.distributed.destroy_process_group()
    return {"rank": rank, "pid": os.getpid(), "version": VERSION}
'''
KEPT_IN_GLOBALS = '''
import os

GROUP = []


def total():
    import torch
    import torch.distributed as dist

    if not GROUP:
        dist.init_process_group("gloo")
        GROUP.append(dist.group.WORLD)
    x = torch.ones(1)
    dist.all_reduce(x)
    return int(x.item())
'''


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Path]:
    """A source tree with the README's service example and its batch example, importable here."""
    root = tmp_path / "src"
    root.mkdir()
    for name in ("digits_service_fns.py", "ddp_digits.py"):
        shutil.copy(ROOT / "examples" / name, root / name)
    (root / "trainer.py").write_text(textwrap.dedent(TRAINER))
    names = ("digits_service_fns", "ddp_digits", "trainer", "kubetorch_ddp", "kept_in_globals")
    for name in names:  # an earlier test may have imported the examples' own copy (test_stack_workflow.py)
        sys.modules.pop(name, None)
    sys.path.insert(0, str(root))
    try:
        yield root
    finally:
        sys.path.remove(str(root))
        for name in names:
            sys.modules.pop(name, None)


def timed(label: str, call: Callable[[], Any]) -> Any:
    """Run ``call``, print how long it took."""
    started = time.perf_counter()
    result = call()
    print(f"{label}: {time.perf_counter() - started:.2f} s", flush=True)
    return result


def compute_of(workers: int, num_proc: int = 1) -> LocalCompute:
    return LocalCompute(workers=workers, num_proc=num_proc, grace_period=1.0)


def test_ddp_training_goes_on_across_an_edit_a_cls_edit_and_a_resize_2_3_2(tree: Path):
    fns = importlib.import_module("digits_service_fns")
    trainer_module = importlib.import_module("trainer")
    computes = [compute_of(2), compute_of(3), compute_of(2)]
    accuracy: list[float] = []
    try:
        train = fn(fns.train).to(computes[0])
        evaluate = fn(fns.evaluate).to(computes[0])

        def check(results: list[dict[str, Any]], epoch: int, ranks: int) -> None:
            assert [r["rank"] for r in results] == list(range(ranks))
            assert {r["epoch"] for r in results} == {epoch}, "every rank continues from the same epoch"
            seen = evaluate()
            assert len({r["params"] for r in seen}) == 1, "the parameters are the same on every rank"
            accuracy.append(seen[0]["accuracy"])

        first = timed("first call (group formed, model built)", lambda: train(epochs=1))
        check(first, 1, 2)
        pids = [r["pid"] for r in first]

        source = tree / "digits_service_fns.py"
        source.write_text(source.read_text().replace('"pid": os.getpid()}', '"pid": os.getpid(), "edited": True}'))
        edited = timed("call after an edit of the module", lambda: train(epochs=1))
        assert [r.get("edited") for r in edited] == [True, True], "the edited code ran"
        assert [r["pid"] for r in edited] == pids, "in the same processes"
        check(edited, 2, 2)

        trainer = cls(trainer_module.Trainer, lr=0.05).to(computes[0])
        check(timed("first call of a cls method", lambda: trainer.step(epochs=1)), 3, 2)
        module = tree / "trainer.py"
        module.write_text(module.read_text().replace("return train(epochs, lr=self.lr)",
                                                     "return {**train(epochs, lr=self.lr), 'method': 2}"))
        stepped = timed("call after an edit of the cls method", lambda: trainer.step(epochs=1))
        assert [r["method"] for r in stepped] == [2, 2]
        check(stepped, 4, 2)

        train = train.to(computes[1])
        evaluate = evaluate.to(computes[1])
        grown = timed("call after a resize to 3 nodes (group formed again)", lambda: train(epochs=1))
        assert [r["world_size"] for r in grown] == [3, 3, 3]
        assert [r["pid"] for r in grown[:2]] == pids
        check(grown, 5, 3)

        train = train.to(computes[2])
        evaluate = evaluate.to(computes[2])
        shrunk = timed("call after a resize back to 2 nodes", lambda: train(epochs=2))
        assert [r["world_size"] for r in shrunk] == [2, 2]
        assert [r["pid"] for r in shrunk] == pids
        check(shrunk, 7, 2)
        print("held-out accuracy after each step:", " ".join(f"{a:.3f}" for a in accuracy), flush=True)
        assert accuracy[-1] > accuracy[0], "training went on across the edits and resizes"
        assert all(b >= a - 0.05 for a, b in zip(accuracy, accuracy[1:])), "no step lost what was trained"
    finally:
        for compute in computes:
            compute.teardown()


def test_kubetorchs_pattern_init_and_destroy_in_every_call_works_call_after_call(tree: Path):
    """Kubetorch's DDP example shape: ``init_process_group`` at the start of the function,
    ``destroy_process_group`` at its end, a ``DistributedDataParallel`` in a local variable. Before
    ``runtime.agent.execution.torchhooks`` the second or a later call hung (torch 2.13, read in
    the venv: ``torch/distributed/rendezvous.py`` ``_create_c10d_store``, ``multi_tenant=True``, and
    ``distributed_c10d.py`` ``destroy_process_group``, which resets ``_world.group_count``)."""
    (tree / "kubetorch_ddp.py").write_text("VERSION = 1\n" + textwrap.dedent(KUBETORCH))
    module = importlib.import_module("kubetorch_ddp")
    with compute_of(2, num_proc=2) as compute:
        remote = fn(module.torch_ddp).to(compute).options(timeout=120)
        runs = [timed(f"call {i + 1}", lambda: remote(2)) for i in range(6)]
        assert all([r["rank"] for r in results] == [0, 1, 2, 3] for results in runs)
        assert len({tuple(r["pid"] for r in results) for results in runs}) == 1, "in the same processes"

        (tree / "kubetorch_ddp.py").write_text("VERSION = 2\n" + textwrap.dedent(KUBETORCH))
        after = [timed(f"call {i + 1} after an edit", lambda: remote(2)) for i in range(2)]
        assert all([r["version"] for r in results] == [2] * 4 for results in after)

        warm = fn(module.torch_ddp).to(ExistingCompute(compute.endpoint.url, compute.endpoint.token))
        warm = warm.options(timeout=120)
        rerun = timed("a warm rerun through ExistingCompute", lambda: warm(1))
        assert [r["pid"] for r in rerun] == [r["pid"] for r in runs[0]]


def test_a_call_on_a_group_kept_for_an_older_world_fails_naming_the_change(tree: Path):
    (tree / "kept_in_globals.py").write_text(textwrap.dedent(KEPT_IN_GLOBALS))
    module = importlib.import_module("kept_in_globals")
    computes = [compute_of(2), compute_of(3)]
    try:
        total = fn(module.total).to(computes[0])
        assert total() == [2, 2]
        grown = total.to(computes[1]).options(timeout=120)
        with pytest.raises(RemoteError, match=r"StaleProcessGroup") as failed:
            timed("a call on the old world's group", grown)
        message = str(failed.value)
        assert "formed for world generation 1" in message and "now 3 node(s)" in message
        assert "runtime.distributed.process_group()" in message, "the fix is named"
    finally:
        for compute in computes:
            compute.teardown()
