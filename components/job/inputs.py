"""``DistributedJobArgsDict``: a job's arguments as Pulumi declares a component's inputs.

One key per :class:`~components.job.args.DistributedJobArgs` field, each with its type, whether it takes
a ``pulumi.Input`` and its documentation (the docstring under it). The Python SDK's component analyzer
(``pulumi.provider.experimental``) infers the ``trainplane`` package schema from these annotations, so
every Pulumi language sees exactly these arguments; ``DistributedJobArgs`` takes its field documentation
from here.

Arguments a user plausibly takes from another resource take a ``pulumi.Input`` (at every depth of their
lists and mappings). The others stay plain because they decide the shape of what is rendered: which
objects exist, the workload kind, pod counts and ports, names Kubernetes derives from the job's, and the
requests a queue's quota is checked against when the job is created.

No ``from __future__ import annotations`` here: the analyzer reads the annotations at run time.
"""

from collections.abc import Mapping, Sequence
from typing import Any, Optional, TypedDict

import pulumi
from typing_extensions import NotRequired


class DistributedJobArgsDict(TypedDict):
    """The arguments of one distributed training job (``DistributedJob``)."""

    image: pulumi.Input[str]
    """Container image; any image with ``python3`` (3.9+) works, the agent is mounted."""
    script: NotRequired[Optional[str]]
    """Path of the training script inside the image (relative to ``working_dir``), run under the image's
    ``python3``. Batch mode: exactly one of ``script``, ``module`` and ``command``. Service mode runs no
    entrypoint (the processes serve calls): leave all three unset."""
    module: NotRequired[Optional[str]]
    """Importable module to run as ``python -m module``."""
    command: NotRequired[Optional[Sequence[str]]]
    """An executable and its arguments, run directly on every rank instead of under Python (torchrun's
    ``--no-python``), e.g. ``["bash", "-c", "..."]`` or ``["/opt/train"]``; looked up on the image's
    ``PATH``. It gets the same environment contract; membership changes are not raised in it (it is not
    Python): it can read its new world from the file named by ``TRAINPLANE_WORLD_FILE``."""
    args: NotRequired[pulumi.Input[Sequence[pulumi.Input[str]]]]
    """Arguments appended to the script, module or command (e.g. a data location from a bucket's
    output). Default: ``[]``."""
    workers: NotRequired[int]
    """Number of nodes (pods), >= 1. Default: ``1``."""
    num_proc: NotRequired[Any]
    """Processes per node: an int >= 1, or ``"auto"`` for one per GPU (needs ``gpus >= 1``).
    Default: ``1``."""
    cpus: NotRequired[Optional[float]]
    """CPU request per pod, cores (``0.5`` = 500m); unset requests nothing."""
    memory: NotRequired[Optional[str]]
    """Memory request and limit per pod, a Kubernetes quantity such as ``"16Gi"``."""
    gpus: NotRequired[int]
    """NVIDIA GPUs per pod (``nvidia.com/gpu`` limit), a whole number. Default: ``0``."""
    distribution: NotRequired[str]
    """Which framework's variables to set: ``spmd`` (every framework's), ``pytorch``, ``jax``,
    ``tensorflow``, ``ray`` or ``monarch``. ``ray`` and ``monarch`` are single-controller: the script runs
    once, on node 0, as the driver of a Ray cluster (``RAY_ADDRESS``) or Monarch host mesh
    (``MONARCH_WORKER_ADDRESSES``) that spans every pod; the image must have ``ray`` or ``torchmonarch``
    installed. They need ``num_proc=1``, no elastic bounds, and listen on ``master_port + 32`` (and
    ``+ 33``, Ray's client server), which ``agent_port`` must not take. Service calls run on node 0.
    Default: ``"spmd"``."""
    mode: NotRequired[str]
    """``batch`` (run to completion) or ``service`` (keep processes alive for calls). Default: ``"batch"``."""
    backend: NotRequired[Optional[str]]
    """Workload kind: ``indexed-job`` or ``pytorchjob`` for batch, ``statefulset`` for service; unset picks
    ``indexed-job`` for batch and ``statefulset`` for service."""
    quorum_workers: NotRequired[Optional[int]]
    """Nodes that must register before the world starts; unset = all workers."""
    quorum_timeout: NotRequired[float]
    """Seconds the coordinator waits for quorum before failing. Default: ``300.0``."""
    monitor_members: NotRequired[bool]
    """Deliver membership changes into user processes. Default: ``true``."""
    min_workers: NotRequired[Optional[int]]
    """Elastic lower bound on nodes; set together with ``max_workers``. A lost node no longer fails the
    job: the survivors continue while at least this many remain."""
    max_workers: NotRequired[Optional[int]]
    """Elastic upper bound on nodes. Nodes beyond ``workers`` can only come from a workload that adds pods:
    a PyTorchJob (its Worker replicas scale up to it) or a StatefulSet (service mode). An Indexed Job has
    exactly ``workers`` indexes, so it only shrinks (a pod replaced after a disruption rejoins under its
    index): there ``max_workers`` must equal ``workers``."""
    max_restarts: NotRequired[int]
    """World restarts after a failure before the job fails. Default: ``0``."""
    backoff_limit: NotRequired[Optional[int]]
    """Elastic batch jobs: failed pods Kubernetes replaces (each replacement rejoins the running world)
    before it fails the job; unset = 3. The Indexed Job's ``backoffLimit`` (failed pods; evictions,
    preemptions and node drains are not counted) or the PyTorchJob's ``runPolicy.backoffLimit`` (container
    restarts, under ``restartPolicy: OnFailure``). A fixed-size job fails on its first pod failure (its
    ``max_restarts`` restarts the world inside the pods instead), so it takes no ``backoff_limit``; neither
    does a service job, whose StatefulSet always replaces pods."""
    active_deadline_seconds: NotRequired[Optional[int]]
    """Batch only: seconds the job may run before Kubernetes stops it (the Indexed Job's
    ``activeDeadlineSeconds``, the PyTorchJob's ``runPolicy.activeDeadlineSeconds``); more than
    ``quorum_timeout``, so a world that cannot form is reported by the agent, not cut off. A service job's
    StatefulSet has no deadline: it runs until the stack removes it."""
    ttl_seconds_after_finished: NotRequired[Optional[int]]
    """Batch only: seconds before a finished job is deleted."""
    gang_scheduler: NotRequired[str]
    """``none``, ``volcano``, ``scheduler-plugins`` or ``kueue``. Default: ``"none"``."""
    queue: NotRequired[Optional[pulumi.Input[str]]]
    """Volcano queue, or the existing Kueue LocalQueue to submit to (e.g. the name of a queue another
    resource created)."""
    cluster_queue: NotRequired[Optional[pulumi.Input[str]]]
    """Kueue only: create a LocalQueue for this job pointing at this ClusterQueue."""
    scheduler_name: NotRequired[Optional[pulumi.Input[str]]]
    """Pod ``schedulerName``; unset = the gang scheduler's own."""
    namespace: NotRequired[pulumi.Input[str]]
    """Namespace of every object, e.g. a ``Namespace`` resource's ``metadata.name``. The component is
    named ``<namespace>/<name>`` outside ``default`` when the namespace is a plain string, and after the
    job alone when it is an Output (Pulumi names resources before Outputs resolve): jobs of one name in
    two namespaces need the namespaces given as strings. Default: ``"default"``."""
    env: NotRequired[pulumi.Input[Mapping[str, pulumi.Input[str]]]]
    """Extra environment for the agent and the user processes; values may be other resources' outputs (a
    database endpoint). A secret value stays a secret in Pulumi's state, but is a plain ``value`` in the pod
    spec. Default: ``{}``."""
    pythonpath: NotRequired[pulumi.Input[Sequence[pulumi.Input[str]]]]
    """Directories in the image (absolute paths) put on the agent's and every user process's PYTHONPATH,
    after the runtime bundle; in service mode, where the modules of the called functions live (e.g.
    ``["/app/examples"]``). Default: ``[]``."""
    labels: NotRequired[pulumi.Input[Mapping[str, pulumi.Input[str]]]]
    """Extra labels on every object and pod. Default: ``{}``."""
    node_selector: NotRequired[pulumi.Input[Mapping[str, pulumi.Input[str]]]]
    """Pod ``nodeSelector`` (e.g. a node group's labels). Default: ``{}``."""
    tolerations: NotRequired[pulumi.Input[Sequence[pulumi.Input[Mapping[str, Any]]]]]
    """Pod tolerations, Kubernetes Toleration objects (``key``, ``operator``, ``value``, ``effect``,
    ``tolerationSeconds``), added to the GPU toleration. Default: ``[]``."""
    service_account: NotRequired[Optional[pulumi.Input[str]]]
    """Pod service account (e.g. a ``ServiceAccount`` resource's ``metadata.name``); unset mounts no API
    token."""
    shm_size: NotRequired[Optional[str]]
    """Size limit of the memory-backed ``/dev/shm``, a quantity; unset = no limit (the pod's memory limit
    still applies)."""
    grace_period: NotRequired[float]
    """Seconds the agent gives its processes between SIGTERM and SIGKILL when the pod stops (a rank's
    checkpoint-on-SIGTERM must fit in it); the pod's ``terminationGracePeriodSeconds`` covers it plus the
    agent's own shutdown. Default: ``5.0``."""
    working_dir: NotRequired[Optional[str]]
    """Container working directory (absolute); unset keeps the image's."""
    image_pull_policy: NotRequired[Optional[str]]
    """``Always``, ``IfNotPresent`` or ``Never``; unset = the Kubernetes default."""
    agent_port: NotRequired[int]
    """The agent's HTTP port (TCP). Default: ``32300``."""
    master_port: NotRequired[int]
    """The torch.distributed rendezvous port on node 0 (TCP), and the base of the ports the job counts up
    from it, up to ``master_port + 63 + procs per pod`` (rendezvous per generation, JAX coordinator,
    TensorFlow workers), which must end below 65536 and leave out ``agent_port``. Default: ``29500``."""
    log_dir: NotRequired[Optional[str]]
    """Where the agent writes per-process logs in the pod (absolute); unset = its default."""
    allow_from: NotRequired[pulumi.Input[Sequence[pulumi.Input[Mapping[str, Any]]]]]
    """Extra NetworkPolicy peers (NetworkPolicyPeer objects) admitted to the agent port, e.g. the namespace
    a client calls from; the job's own pods are always admitted. Default: ``[]``."""
    cluster_domain: NotRequired[str]
    """The cluster's DNS domain, for the FQDN outputs. Default: ``"cluster.local"``."""
    daemon_args: NotRequired[Sequence[str]]
    """``ray`` only: arguments appended to every pod's ``ray start``, after the ones derived from ``cpus``
    (``--num-cpus``) and ``gpus`` (``--num-gpus``), e.g. ``["--object-store-memory=2000000000"]``.
    Default: ``[]``."""
