"""Service mode on one machine: deploy a job, train in several calls, then evaluate.

From the repository root (or anywhere once the package is installed with ``pip install -e .``)::

    PYTHONPATH=. python examples/service_digits.py --workers 2 --num-proc 2

The workflow API starts local agents in service mode; each call runs ``train`` on every rank of the
same long-lived processes, so the DDP model keeps training from call to call, and ``evaluate`` reads
the model those calls trained. The remote functions live in ``digits_service_fns.py`` next to this
file; ``fn`` puts this directory on the workers' PYTHONPATH.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from digits_service_fns import evaluate, train

from runtime.workflow import LocalCompute, fn


def parse_args() -> argparse.Namespace:
    """Command line of the example."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=2, help="nodes")
    p.add_argument("--num-proc", type=int, default=2, help="processes per node")
    p.add_argument("--calls", type=int, default=3, help="training calls")
    p.add_argument("--epochs-per-call", type=int, default=4)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--summary", default=None, help="write a JSON summary of every call here")
    return p.parse_args()


def main() -> None:
    """Deploy, train in several calls, evaluate, tear down."""
    args = parse_args()
    compute = LocalCompute(workers=args.workers, num_proc=args.num_proc).distribute("pytorch")
    calls = []
    with fn(train).to(compute) as remote_train:
        for i in range(args.calls):
            started = time.perf_counter()
            results = remote_train(epochs=args.epochs_per_call, lr=args.lr)
            calls.append(results)
            print(f"call {i + 1}/{args.calls}: epoch {results[0]['epoch']} loss {results[0]['loss']:.4f} "
                  f"on {len(results)} ranks ({time.perf_counter() - started:.1f} s)", flush=True)
        evaluation = fn(evaluate).to(compute)()
        same = len({r["params"] for r in evaluation}) == 1
        print(f"held-out accuracy {evaluation[0]['accuracy']:.4f} after {evaluation[0]['epoch']} epochs; "
              f"parameters identical on all {len(evaluation)} ranks: {same}", flush=True)
    if args.summary:
        Path(args.summary).write_text(json.dumps({"train": calls, "evaluate": evaluation}))


if __name__ == "__main__":
    main()
