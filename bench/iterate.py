"""The dev loop: edit the called function's source, call again, get the new value from every rank.

::

    PYTHONPATH=. python bench/iterate.py     # both cases: 10 edits, 3 cold starts, one resize each
    PYTHONPATH=. python bench/iterate.py --case ddp
    PYTHONPATH=. python bench/iterate.py --quick    # 3 edits, 1 cold start, no resize: the same last lines

Two cases, each measured against its own cold start in the same run: ``plain`` (the module imports
torch) and ``ddp`` (each call all-reduces over the job's process group, held by
``runtime.distributed.process_group()``: formed by the first call, kept across every edit, formed
again after the resize, at world size 6).

A 2 x 2 local service job (``LocalCompute(workers=2, num_proc=2)``) runs ``value()`` from a module
that imports torch, in a temporary directory of its own (so the tree synced is that module alone).
Measured in the same run, with the workflow API as a user calls it (remote output on):

* ``cold_start_ms``: from making the compute to the first result of ``fn(value).to(compute)()``:
  agents started, the world formed, the code sent, four processes importing torch and the module
  (median of ``--cold-starts``);
* ``edit_to_result_ms``: from writing the edited module (its return value changes) to the first
  call whose every rank returns the new value, calls made one after another (median of ``--edits``);
* ``resize_ms``: from ``.to()`` a 3 x 2 compute to the first result at world size 6 (the new node's
  processes import torch and the module then).

Per case, the last line is ``iterate[<case>] edit_to_result_ms=... cold_start_ms=...``; the line
before it has the ratio and the resize. Target (DESIGN.md): ``edit_to_result_ms <= 1000``, with the
group kept in the ``ddp`` case.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

from runtime.workflow import LocalCompute, fn

MODULE = "iterate_target"
SOURCE = '''import torch

VALUE = {value}


def value():
    """The value this version returns, through torch."""
    return int(torch.tensor(VALUE).item())
'''
SOURCE_DDP = '''import torch
import torch.distributed as dist

from runtime import distributed

VALUE = {value}


def value():
    """The value this version returns, all-reduced over the job's process group."""
    group = distributed.process_group()
    total = torch.tensor([VALUE])
    dist.all_reduce(total)
    return int(total.item()) // group.world_size
'''
SOURCES = {"plain": SOURCE, "ddp": SOURCE_DDP}


class Measured(NamedTuple):
    """One case's times, milliseconds."""

    edits: list[float]
    cold: list[float]
    resize: float
    """``nan`` when not measured (``--quick``)."""


def write(root: Path, value: int, source: str = SOURCE) -> None:
    """The module's source, returning ``value``."""
    (root / f"{MODULE}.py").write_text(source.format(value=value))


def first_with(remote: Any, expected: int, ranks: int) -> None:
    """Call until every one of ``ranks`` ranks returns ``expected``."""
    while True:
        results = remote()
        if results == [expected] * ranks:
            return


def measure(case: str, edits_n: int, cold_starts: int, resize_too: bool = True) -> Measured:
    """Cold starts, edits and (``resize_too``) one resize of one case, in a temporary directory of
    its own. The edits run on the last cold start's job, which has answered its first call."""
    source = SOURCES[case]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp, "src")
        root.mkdir()
        write(root, 0, source)
        sys.path.insert(0, str(root))
        sys.modules.pop(MODULE, None)
        module = importlib.import_module(MODULE)
        cold: list[float] = []
        try:
            for _ in range(cold_starts - 1):
                started = time.perf_counter()
                remote = fn(module.value).to(LocalCompute(workers=2, num_proc=2, log_dir=str(Path(tmp, "logs"))))
                first_with(remote, 0, 4)
                cold.append((time.perf_counter() - started) * 1000)
                remote.teardown()
            started = time.perf_counter()
            remote = fn(module.value).to(LocalCompute(workers=2, num_proc=2, log_dir=str(Path(tmp, "logs"))))
            try:
                first_with(remote, 0, 4)
                cold.append((time.perf_counter() - started) * 1000)
                edits: list[float] = []
                for value in range(1, edits_n + 1):
                    started = time.perf_counter()
                    write(root, value, source)
                    first_with(remote, value, 4)
                    edits.append((time.perf_counter() - started) * 1000)
                resize = float("nan")
                if resize_too:
                    started = time.perf_counter()
                    remote = remote.to(LocalCompute(workers=3, num_proc=2, log_dir=str(Path(tmp, "logs"))))
                    first_with(remote, edits_n, 6)
                    resize = (time.perf_counter() - started) * 1000
            finally:
                remote.teardown()
        finally:
            sys.path.remove(str(root))
    return Measured(edits, cold, resize)


def main() -> None:
    """Run the measurements and print, per case, one line per part and the summary line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edits", type=int, default=10, help="timed edits (default 10)")
    parser.add_argument("--cold-starts", type=int, default=3, help="timed cold starts (default 3)")
    parser.add_argument("--case", choices=("plain", "ddp", "both"), default="both",
                        help="plain: the module imports torch; ddp: each call all-reduces over a kept group")
    parser.add_argument("--quick", action="store_true", help="3 edits, 1 cold start and no resize per case")
    args = parser.parse_args()
    if args.quick:
        args.edits, args.cold_starts = 3, 1
    if args.edits < 1 or args.cold_starts < 1:
        parser.error(f"--edits {args.edits} --cold-starts {args.cold_starts}: use 1 or more of each")
    for case in ("plain", "ddp") if args.case == "both" else (args.case,):
        load = os.getloadavg()[0]
        measured = measure(case, args.edits, args.cold_starts, resize_too=not args.quick)
        edit, start = statistics.median(measured.edits), statistics.median(measured.cold)
        print(f"[{case}] edits ms: {' '.join(f'{t:.0f}' for t in measured.edits)}")
        print(f"[{case}] cold starts ms: {' '.join(f'{t:.0f}' for t in measured.cold)}")
        print(f"[{case}] load average {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")
        print(f"iterate[{case}] ratio={edit / start:.3f} resize_2_to_3_ms={measured.resize:.0f}")
        print(f"iterate[{case}] edit_to_result_ms={edit:.0f} cold_start_ms={start:.0f}", flush=True)


if __name__ == "__main__":
    main()
