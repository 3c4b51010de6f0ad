"""Service mode: deploy a job (or attach to a running one), train in several calls, then evaluate.

From the repository root (or anywhere once the package is installed with ``pip install -e .``)::

    PYTHONPATH=. python examples/service_digits.py --workers 2 --num-proc 2

The workflow API starts local agents in service mode; each call runs ``train`` on every rank of the
same long-lived processes, so the DDP model keeps training from call to call, and ``evaluate`` reads
the model those calls trained. The remote functions live in ``digits_service_fns.py`` next to this
file; ``fn`` puts this directory on the workers' PYTHONPATH.

``--url`` attaches to a service-mode job that is already running instead, e.g. the local stack's
``digits-service`` job through a port-forward (docs/stacks.md), with the job's token in the
environment variable ``TRAINPLANE_TOKEN`` (``--token`` also works, but shows the token to anyone who
can list processes)::

    kubectl port-forward pod/digits-service-0 32300:32300 &
    export TRAINPLANE_TOKEN=...      # pulumi stack output tokens --show-secrets
    PYTHONPATH=. python examples/service_digits.py --url http://127.0.0.1:32300 --min-accuracy 0.9

That job's size is its deployment's, its workers import ``digits_service_fns`` from their own
image (the job's ``pythonpath``), and it keeps running, and keeps its model, after this script
exits: a second run continues training where the first stopped. This driver needs only the client
(httpx); torch runs in the job.

``--image`` deploys the job to a Kubernetes cluster instead, as a Pulumi stack of its own
(``KubernetesCompute``: the Automation API, so the Pulumi CLI must be installed, and a port-forward
to node 0 through the ``kubernetes`` client, no kubectl). The image must hold ``examples/`` at
``/app/examples`` (``stacks/images/examples.Dockerfile``)::

    PYTHONPATH=. python examples/service_digits.py --image trainplane-examples:dev --keep

``--keep`` leaves the job running when the script ends, so the next run with the same arguments
reattaches to it (and its model) instead of deploying again; without it the script destroys the
job's stack at the end.

``--grow N`` (a local job only) then resizes the job to N nodes in place and trains once more:
the same processes keep their model, the new nodes' ranks get it from rank 0
(``digits_service_fns.py`` holds the group and the state in ``runtime.distributed``)::

    PYTHONPATH=. python examples/service_digits.py --workers 2 --grow 3

``--min-accuracy`` makes the script exit with status 1 and a message when the held-out accuracy is
below it (CI uses it to check that training works end to end).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

from digits_service_fns import evaluate, train

from runtime import TrainplaneError
from runtime.agent import contract
from runtime.workflow import Compute, ExistingCompute, KubernetesCompute, LocalCompute, fn

LOCAL_WORKERS = 2
LOCAL_NUM_PROC = 2
IMAGE_EXAMPLES = "/app/examples"
"""Where the examples image keeps this directory (stacks/images/examples.Dockerfile)."""


def accuracy(text: str) -> float:
    """An accuracy threshold: a number from 0 to 1."""
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not an accuracy: use a number from 0 to 1, e.g. 0.9")
    return value


def parser() -> argparse.ArgumentParser:
    """The example's command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=None,
                   help=f"local or Kubernetes job: nodes (default {LOCAL_WORKERS})")
    p.add_argument("--num-proc", type=int, default=None,
                   help=f"local or Kubernetes job: processes per node (default {LOCAL_NUM_PROC})")
    p.add_argument("--url", default=None,
                   help="attach to the running service-mode job whose coordinator is at this URL "
                        "(e.g. http://127.0.0.1:32300) instead of starting a local job")
    p.add_argument("--token", default=os.environ.get(contract.TOKEN),
                   help=f"with --url: the job's token (default: ${contract.TOKEN}, which keeps it off the "
                        "command line)")
    p.add_argument("--image", default=None,
                   help="deploy the job to Kubernetes with this image (KubernetesCompute; needs the Pulumi CLI)")
    p.add_argument("--namespace", default=None, help="with --image: the namespace (default: default)")
    p.add_argument("--kubeconfig", default=None,
                   help="with --image: the kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    p.add_argument("--context", default=None, help="with --image: the kubeconfig context (default: its current one)")
    p.add_argument("--keep", action="store_true",
                   help="with --image: leave the job running at the end, for the next run to reattach to")
    p.add_argument("--ready-timeout", type=float, default=None,
                   help="seconds the job may take to be ready (default 120; 600 with --image)")
    p.add_argument("--calls", type=int, default=3, help="training calls")
    p.add_argument("--epochs-per-call", type=int, default=4)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--grow", type=int, default=None,
                   help="local job: after the training calls, resize the job to this many nodes and train once more")
    p.add_argument("--min-accuracy", type=accuracy, default=None,
                   help="exit with status 1 if the held-out accuracy is below this (0 to 1)")
    p.add_argument("--summary", default=None, help="write a JSON summary of every call here")
    return p


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse and check the command line; exits with status 2 and the reason when it is inconsistent."""
    p = parser()
    args = p.parse_args(argv)
    if args.url is not None:
        if args.workers is not None or args.num_proc is not None:
            p.error("--workers and --num-proc size a local job; a job attached with --url has its deployment's size")
        if args.image is not None:
            p.error("--url attaches to a running job and --image deploys one: pass one of them")
        if not args.token:
            p.error(f"--url needs the job's token: set {contract.TOKEN} (or pass --token)")
    if args.grow is not None and (args.url is not None or args.image is not None or args.grow < 1):
        p.error("--grow resizes a local job: use it without --url and --image, with 1 or more nodes")
    if args.image is None:
        given = [f"--{name.replace('_', '-')}" for name in ("namespace", "kubeconfig", "context", "keep")
                 if getattr(args, name)]
        if given:
            p.error(f"{', '.join(given)} configure a Kubernetes job: add --image IMAGE")
    return args


def compute_for(args: argparse.Namespace) -> Compute:
    """The running job given by ``--url``, a job on Kubernetes (``--image``), or a new local job."""
    timeout = {} if args.ready_timeout is None else {"ready_timeout": args.ready_timeout}
    if args.url is not None:
        return ExistingCompute(args.url, args.token, **timeout)
    size = {"workers": args.workers or LOCAL_WORKERS, "num_proc": args.num_proc or LOCAL_NUM_PROC}
    if args.image is not None:
        return KubernetesCompute(image=args.image, cpus=0.5, memory="2Gi", namespace=args.namespace or "default",
                                 kubeconfig=args.kubeconfig, context=args.context, pythonpath=[IMAGE_EXAMPLES],
                                 **timeout).distribute("pytorch", **size)
    return LocalCompute(**timeout).distribute("pytorch", **size)


def run(args: argparse.Namespace, compute: Compute) -> tuple[list, list]:
    """Deploy or attach, train in several calls, evaluate; then tear down, detach, or (``--keep``) leave the
    job running. Returns every training call's results and the evaluation's."""
    calls = []
    remote_train = fn(train).to(compute)
    try:
        if args.url is not None:
            print(f"attached to {args.url}: {compute.workers} nodes x {compute.num_proc} processes", flush=True)
        for i in range(args.calls):
            started = time.perf_counter()
            results = remote_train(epochs=args.epochs_per_call, lr=args.lr)
            calls.append(results)
            print(f"call {i + 1}/{args.calls}: epoch {results[0]['epoch']} loss {results[0]['loss']:.4f} "
                  f"on {len(results)} ranks ({time.perf_counter() - started:.1f} s)", flush=True)
        if args.grow is not None:
            started = time.perf_counter()
            compute = LocalCompute(**({} if args.ready_timeout is None else {"ready_timeout": args.ready_timeout})
                                   ).distribute("pytorch", workers=args.grow, num_proc=compute.num_proc)
            remote_train = remote_train.to(compute)
            results = remote_train(epochs=args.epochs_per_call, lr=args.lr)
            calls.append(results)
            print(f"resized to {args.grow} nodes: epoch {results[0]['epoch']} loss {results[0]['loss']:.4f} "
                  f"on {len(results)} ranks ({time.perf_counter() - started:.1f} s)", flush=True)
        evaluation = fn(evaluate).to(compute)()
        same = len({r["params"] for r in evaluation}) == 1
        print(f"held-out accuracy {evaluation[0]['accuracy']:.4f} after {evaluation[0]['epoch']} epochs; "
              f"parameters identical on all {len(evaluation)} ranks: {same}", flush=True)
    finally:
        remote_train.close()
        if args.keep:
            compute.release()
        else:
            compute.teardown()
    return calls, evaluation


def main() -> None:
    """Deploy or attach, train in several calls, evaluate, tear down (or detach); check the accuracy."""
    args = parse_args()
    try:
        calls, evaluation = run(args, compute_for(args))
    except TrainplaneError as exc:
        sys.exit(f"{type(exc).__name__}: {exc}")
    if args.summary:
        Path(args.summary).write_text(json.dumps({"train": calls, "evaluate": evaluation}))
    if args.min_accuracy is not None and evaluation[0]["accuracy"] < args.min_accuracy:
        sys.exit(f"held-out accuracy {evaluation[0]['accuracy']:.4f} is below --min-accuracy {args.min_accuracy:g}")


if __name__ == "__main__":
    main()
