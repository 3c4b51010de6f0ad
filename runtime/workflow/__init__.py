"""Workflow API in Kubetorch's style: send a function to a compute target, call it on every rank.

::

    compute = LocalCompute(workers=4, num_proc=2).distribute("pytorch")
    train = fn(train).to(compute)          # starts the job, or reuses it
    results = train(epochs=3)              # one result per rank, in rank order
    train.options(timeout=60)(epochs=3)    # the same with a deadline (call options: runtime.workflow.functions)
    train.teardown()                       # or: with fn(train).to(compute) as train: ...
    trainer = cls(Trainer, lr=0.1).to(compute)   # one instance per rank, kept between calls
    trainer.step(batch=32)                 # the method on every rank, results in rank order

Three parts, kept apart as in the rest of the runtime: a :class:`Compute` is *where and how big* (a
spec that can also hold its running job), an :class:`Endpoint` is *the running job* as a caller sees
it (URL and token), and a :class:`RemoteFunction` is *what to call* there through ``runtime.client``.

Compute kinds, one module each; a kind implements ``_start(request) -> Endpoint`` and ``_stop()``:

* :class:`LocalCompute` (``local_compute``) starts local agent processes (``runtime.local.jobs``);
* :class:`ExistingCompute` (``existing``) attaches to a service-mode job that is already running,
  such as a stack's job reached through ``kubectl port-forward``; it neither starts nor stops it;
* :class:`KubernetesCompute` (``kubernetes_compute``) deploys a service-mode ``DistributedJob`` as
  a Pulumi stack of its own with the Automation API (``stacks``, ``program``) and reaches node 0
  through a port-forward opened with the ``kubernetes`` client (``portforward``).

The called function must be importable by the worker processes: defined with ``def`` at the top
level of a module in a ``.py`` file; ``fn()`` refuses anything else at once (``locate``). Its code
travels with the calls, whatever the compute: every call names the caller's source tree (the
function's import root) by digest, the job's agents receive the tree when they lack it and its
processes import from it, reloading in place only the modules that changed (``codesync``;
``runtime.agent.code``). A function defined
in the driver script itself is imported from that script's file by its stem, so the script must
keep its driver code under ``if __name__ == "__main__":``: ``.to()`` inside a job's own process
raises :class:`NestedJobError` (``guard``) instead of starting jobs inside jobs.

Importing this package needs httpx (the client); Pulumi, the components and the ``kubernetes``
client are imported only when a ``KubernetesCompute`` is made or deploys.
"""

from runtime.workflow.classes import RemoteInstance, cls
from runtime.workflow.compute import Compute, DeployRequest, Endpoint
from runtime.workflow.errors import DeployError, NestedJobError
from runtime.workflow.existing import ExistingCompute
from runtime.workflow.functions import CallOptions, RemoteFunction, fn
from runtime.workflow.kubernetes_compute import KubernetesCompute
from runtime.workflow.local_compute import LocalCompute
from runtime.workflow.locate import Location, locate

__all__ = [
    "CallOptions",
    "Compute",
    "DeployError",
    "DeployRequest",
    "Endpoint",
    "ExistingCompute",
    "KubernetesCompute",
    "LocalCompute",
    "Location",
    "NestedJobError",
    "RemoteFunction",
    "RemoteInstance",
    "cls",
    "fn",
    "locate",
]
