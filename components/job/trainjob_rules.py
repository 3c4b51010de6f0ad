"""What a TrainJob (``backend="trainjob"``) cannot do, refused when the args are built with the reason and
the backend that can. Kubeflow Trainer v2.3.0's rules (github.com/kubeflow/trainer, tag v2.3.0):

* the torch plugin has no elastic support (``pkg/runtime/framework/plugins/torch/torch.go``: "TODO: Add
  support for PyTorch elastic when JobSet supports Elastic Jobs"): ``PET_NNODES`` is one number;
* a JobSet's Jobs end when their processes exit, so nothing serves calls;
* the PodGroup the Trainer makes for a gang has ``minMember`` = every pod (``coscheduling.go`` and
  ``volcano.go``, ``Build``), so a quorum below ``workers`` would never be scheduled as such;
* ``PET_MASTER_PORT`` is ``constants.ContainerTrainerPort`` (29500) on every node;
* a runtime patch sets only the pod fields its CRD lists (``PodSpecPatch``: no ``schedulerName``, no
  ``automountServiceAccountToken``) and, on the ``node`` container, only env-free ``volumeMounts`` and
  ``securityContext`` (no ``workingDir``, no ``imagePullPolicy``); the JobSet's ``ttlSecondsAfterFinished`` is the
  runtime's;
* the Trainer's webhook refuses ``trainer.env`` naming a ``PET_*`` variable it sets (``torch.go``, ``Validate``);
* Kueue v0.19.2 (kubernetes-sigs/kueue, ``go.mod``: github.com/kubeflow/trainer/v2 v2.2.1) admits a TrainJob by
  updating it through the v2.2.1 types (``pkg/controller/jobs/trainjob/trainjob_controller.go``,
  ``RunWithPodSetsInfo``), whose ``PodSpecPatch`` has no ``terminationGracePeriodSeconds``: the field leaves
  trainplane's runtime patch, the Trainer rebuilds the suspended JobSet without it, and JobSet v0.12.0's webhook
  refuses that as an immutable change (``pkg/webhooks/jobset_webhook.go``, ``ValidateUpdate``: only labels,
  annotations, node selector, tolerations and scheduling gates may change while suspended), so the job never
  starts (shown live in ``tests/cluster/live_kueue_trainjob.py``). The runtime's pods have the default grace
  period's (``trainer_runtime.TERMINATION_GRACE_SECONDS``); a queued job with another is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from components.addons.trainer_runtime import TERMINATION_GRACE_SECONDS, TRAINER_PORT
from components.capabilities import KUEUE, SCHEDULER_PLUGINS, VOLCANO
from components.errors import InvalidJobArgs
from components.grace import termination_grace_seconds
from components.job.backends import INDEXED_JOB, PYTORCHJOB, STATEFULSET, TRAINJOB
from runtime.agent import contract

if TYPE_CHECKING:
    from components.job.args import DistributedJobArgs

POD_FIELDS_NOT_PATCHED = {
    "scheduler_name": "the pods' schedulerName is the runtime's (its gang scheduler's)",
    "service_account": "a runtime patch can name a service account but not mount its token, which trainplane's "
                       "runtime keeps off (automountServiceAccountToken: false)",
    "working_dir": "a runtime patch cannot set the node container's workingDir",
    "image_pull_policy": "a runtime patch cannot set the node container's imagePullPolicy",
    "ttl_seconds_after_finished": "a TrainJob has no such field and a runtime patch cannot set the JobSet's",
}
"""Fields a TrainJob cannot carry, and why."""
TRAINER_PET = (contract.PET_NNODES, contract.PET_NPROC_PER_NODE, contract.PET_NODE_RANK, contract.PET_MASTER_ADDR,
               contract.PET_MASTER_PORT)
"""The variables the torch plugin sets (``constants.TorchRunReservedEnvNames``)."""


def validate(a: DistributedJobArgs) -> None:
    """The TrainJob rules, for a job whose backend is ``trainjob`` (nothing otherwise).

    Raises:
        InvalidJobArgs: the first rule broken, naming the field, the reason and the backend that can.
    """
    if a.backend != TRAINJOB:
        return
    if a.mode == "service":
        raise InvalidJobArgs("backend", a.backend, "a TrainJob's JobSet ends when its processes exit, and service "
                             "mode keeps them up to serve calls", f'use backend="{STATEFULSET}" (or leave it unset)')
    gang = a.gang_scheduler in (VOLCANO, SCHEDULER_PLUGINS)
    if gang and isinstance(a.quorum_workers, int) and isinstance(a.workers, int) and a.quorum_workers < a.workers:
        raise InvalidJobArgs("quorum_workers", a.quorum_workers, "the PodGroup the Trainer makes for "
                             f"{a.gang_scheduler} has minMember = every pod ({a.workers}), so the job never starts "
                             "with fewer",
                             f'unset quorum_workers, or use backend="{INDEXED_JOB}" (its PodGroup\'s minMember is '
                             "the quorum)")
    if a.min_workers is not None or a.max_workers is not None:
        name = "min_workers" if a.min_workers is not None else "max_workers"
        raise InvalidJobArgs(name, getattr(a, name), "Kubeflow Trainer's torch plugin has no elastic support yet "
                             "(PET_NNODES is one node count)", f'use backend="{PYTORCHJOB}" (grows to max_workers) '
                             f'or "{INDEXED_JOB}" (shrinks to min_workers), or unset min_workers and max_workers')
    if a.master_port != TRAINER_PORT:
        raise InvalidJobArgs("master_port", a.master_port, "the Trainer tells every node "
                             f"PET_MASTER_PORT={TRAINER_PORT}, which the agent checks against master_port",
                             f'set master_port={TRAINER_PORT}, or use backend="{INDEXED_JOB}"')
    for name, why in POD_FIELDS_NOT_PATCHED.items():
        if getattr(a, name) is not None:
            raise InvalidJobArgs(name, getattr(a, name), f"{why}", f'unset {name}, or use backend="{INDEXED_JOB}"')
    if (a.gang_scheduler == KUEUE and isinstance(a.grace_period, (int, float))
            and termination_grace_seconds(a.grace_period) != TERMINATION_GRACE_SECONDS):
        raise InvalidJobArgs("grace_period", a.grace_period,
                             "Kueue 0.19 drops a TrainJob's own grace period when it admits the job, and JobSet "
                             "then refuses the Trainer's change, so the job never starts",
                             "unset grace_period (the runtime's pods have its default), or use "
                             f'backend="{INDEXED_JOB}"')
    env = a.env
    if isinstance(env, Mapping):
        for key in env:
            if key in TRAINER_PET:
                raise InvalidJobArgs(f"env[{key!r}]", env[key], "is set by the Trainer's torch plugin, whose "
                                     "webhook refuses a TrainJob setting it", "remove it")
