"""The dev loop: edit the called function's source, call again, get the new value from every rank.

::

    PYTHONPATH=. python bench/iterate.py     # 10 edits, 3 cold starts, one resize (about a minute)

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

The last line is ``iterate edit_to_result_ms=... cold_start_ms=...``; the line before it has the
ratio and the resize. Target (DESIGN.md): ``edit_to_result_ms <= 1000``.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from runtime.workflow import LocalCompute, fn

MODULE = "iterate_target"
SOURCE = '''import torch

VALUE = {value}


def value():
    """The value this version returns, through torch."""
    return int(torch.tensor(VALUE).item())
'''


def write(root: Path, value: int) -> None:
    """The module's source, returning ``value``."""
    (root / f"{MODULE}.py").write_text(SOURCE.format(value=value))


def first_with(remote: Any, expected: int, ranks: int) -> None:
    """Call until every one of ``ranks`` ranks returns ``expected``."""
    while True:
        results = remote()
        if results == [expected] * ranks:
            return


def main() -> None:
    """Run the measurements and print one line per part and the summary line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edits", type=int, default=10, help="timed edits (default 10)")
    parser.add_argument("--cold-starts", type=int, default=3, help="timed cold starts (default 3)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp, "src")
        root.mkdir()
        write(root, 0)
        sys.path.insert(0, str(root))
        module = importlib.import_module(MODULE)
        cold: list[float] = []
        for _ in range(args.cold_starts):
            started = time.perf_counter()
            compute = LocalCompute(workers=2, num_proc=2, log_dir=str(Path(tmp, "logs")))
            remote = fn(module.value).to(compute)
            first_with(remote, 0, 4)
            cold.append((time.perf_counter() - started) * 1000)
            remote.teardown()
        compute = LocalCompute(workers=2, num_proc=2, log_dir=str(Path(tmp, "logs")))
        remote = fn(module.value).to(compute)
        try:
            first_with(remote, 0, 4)
            edits: list[float] = []
            for value in range(1, args.edits + 1):
                started = time.perf_counter()
                write(root, value)
                first_with(remote, value, 4)
                edits.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            remote = remote.to(LocalCompute(workers=3, num_proc=2, log_dir=str(Path(tmp, "logs"))))
            first_with(remote, args.edits, 6)
            resize = (time.perf_counter() - started) * 1000
        finally:
            remote.teardown()
    edit, start = statistics.median(edits), statistics.median(cold)
    print(f"edits ms: {' '.join(f'{t:.0f}' for t in edits)}")
    print(f"cold starts ms: {' '.join(f'{t:.0f}' for t in cold)}")
    print(f"iterate ratio={edit / start:.3f} resize_2_to_3_ms={resize:.0f}")
    print(f"iterate edit_to_result_ms={edit:.0f} cold_start_ms={start:.0f}")


if __name__ == "__main__":
    main()
