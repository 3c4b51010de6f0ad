"""``DistributedJobArgs``: what to run and how, validated on construction.

Every check raises :class:`~components.errors.InvalidJobArgs` naming the field, the value and the
fix, so a bad stack config fails at ``pulumi preview`` instead of as a pod stuck in Pending.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Mapping, Optional, Sequence, Union

from components import validate
from components.capabilities import GANG_SCHEDULERS, KUEUE, NO_GANG, SCHEDULER_PLUGINS, VOLCANO
from components.errors import InvalidJobArgs
from components.job import checks
from runtime.agent import contract
from runtime.agent.execution import controller
from runtime.agent.execution.environment import reserved_ports
from runtime.agent.spec.job import DISTRIBUTIONS, SINGLE_CONTROLLER

MODES = ("batch", "service")
INDEXED_JOB = "indexed-job"
PYTORCHJOB = "pytorchjob"
STATEFULSET = "statefulset"
BACKENDS = (INDEXED_JOB, PYTORCHJOB, STATEFULSET)
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
TOLERATION_KEYS = frozenset({"key", "operator", "value", "effect", "tolerationSeconds"})
PEER_KEYS = frozenset({"podSelector", "namespaceSelector", "ipBlock"})
MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")

PROCESS_ENV = (
    contract.WORLD_SIZE, contract.RANK, contract.LOCAL_RANK, contract.LOCAL_WORLD_SIZE,
    contract.NODE_RANK, contract.GROUP_RANK, contract.NODE_WORLD_SIZE, contract.GROUP_WORLD_SIZE,
    contract.POD_IPS, contract.MASTER_ADDR, contract.MASTER_PORT, contract.TORCHELASTIC_RUN_ID,
    contract.TORCHELASTIC_RESTART_COUNT, contract.TORCHELASTIC_MAX_RESTARTS,
    contract.JAX_COORDINATOR_ADDRESS, contract.JAX_NUM_PROCESSES, contract.JAX_PROCESS_ID,
    contract.JAX_LOCAL_DEVICE_IDS, contract.TF_CONFIG, contract.RAY_ADDRESS, contract.MONARCH_WORKER_ADDRESSES,
    contract.POD_IP, contract.POD_NAME, contract.POD_NAMESPACE, contract.JOB_COMPLETION_INDEX,
    "PYTHONPATH",
)
"""Variables the component or the agent sets; user ``env`` may not override them."""
RESERVED_ENV_PREFIX = "TRAINPLANE_"
SETTING_FIELDS = {
    contract.GRACE_PERIOD: "grace_period", contract.MAX_RESTARTS: "max_restarts",
    contract.QUORUM_TIMEOUT: "quorum_timeout", contract.QUORUM_WORKERS: "quorum_workers",
    contract.WORKERS: "workers", contract.NUM_PROC: "num_proc", contract.MIN_WORKERS: "min_workers",
    contract.MAX_WORKERS: "max_workers", contract.LOG_DIR: "log_dir", contract.MONITOR_MEMBERS: "monitor_members",
    contract.DISTRIBUTION: "distribution", contract.MODE: "mode", contract.AGENT_PORT_SETTING: "agent_port",
    contract.MASTER_PORT: "master_port", contract.DAEMON_ARGS: "daemon_args",
}
"""The agent settings a DistributedJobArgs field sets, for the fix of a user ``env`` that sets one."""
OWNED_LABELS = (
    contract.LABEL_NAME, contract.LABEL_INSTANCE, contract.LABEL_COMPONENT, contract.LABEL_PART_OF,
    contract.LABEL_MANAGED_BY, contract.LABEL_JOB,
)
DEFAULT_GRACE_PERIOD = 5.0
"""The agent's own default SIGTERM-to-SIGKILL grace, seconds (``runtime.agent.spec.settings``)."""
DEFAULT_BACKOFF_LIMIT = 3
"""Failed pods of an elastic batch job that Kubernetes replaces before it fails the job."""
STATEFULSET_HASH_SUFFIX = 11
"""A StatefulSet's pods carry ``controller-revision-hash: <name>-<hash of up to 10 characters>``, a
63-character label: the name takes at most 52."""


@dataclass(frozen=True)
class DistributedJobArgs:
    """Settings of one distributed training job.

    Attributes:
        image: container image; any image with ``python3`` (3.9+) works, the agent is mounted.
        script: path of the training script inside the image (relative to ``working_dir``), run
            under the image's ``python3``. Batch mode: exactly one of ``script``, ``module`` and
            ``command``. Service mode runs no entrypoint (the processes serve calls): leave all
            three unset.
        module: importable module to run as ``python -m module``.
        command: an executable and its arguments, run directly on every rank instead of under
            Python (torchrun's ``--no-python``), e.g. ``["bash", "-c", "..."]`` or
            ``["/opt/train"]``; looked up on the image's ``PATH``. It gets the same environment
            contract; membership changes are not raised in it (it is not Python): it can read its
            new world from the file named by ``TRAINPLANE_WORLD_FILE``.
        args: arguments appended to the script, module or command.
        workers: number of nodes (pods), >= 1.
        num_proc: processes per node, or ``"auto"`` for one per GPU (needs ``gpus >= 1``).
        cpus: CPU request per pod, cores (``0.5`` = 500m); ``None`` requests nothing.
        memory: memory request and limit per pod, a Kubernetes quantity such as ``"16Gi"``.
        gpus: NVIDIA GPUs per pod (``nvidia.com/gpu`` limit), a whole number.
        distribution: which framework's variables to set: one of the agent's
            :data:`runtime.agent.world.DISTRIBUTIONS` (``spmd`` sets every framework's). ``ray`` and
            ``monarch`` are single-controller: the script runs once, on node 0, as the driver of a
            Ray cluster (``RAY_ADDRESS``) or Monarch host mesh (``MONARCH_WORKER_ADDRESSES``) that
            spans every pod; the image must have ``ray`` or ``torchmonarch`` installed. They need
            ``num_proc=1``, no elastic bounds, and listen on ``master_port + 32`` (and ``+ 33``, Ray's
            client server), which ``agent_port`` must not take. Service calls run on node 0.
        daemon_args: ``ray`` only: arguments appended to every pod's ``ray start``, after the ones
            derived from ``cpus`` (``--num-cpus``) and ``gpus`` (``--num-gpus``), e.g.
            ``["--object-store-memory=2000000000"]``.
        mode: ``batch`` (run to completion) or ``service`` (keep processes alive for calls).
        backend: workload kind: ``indexed-job`` or ``pytorchjob`` for batch, ``statefulset`` for
            service; ``None`` picks ``indexed-job`` for batch and ``statefulset`` for service.
        quorum_workers: nodes that must register before the world starts; ``None`` = all workers.
        quorum_timeout: seconds the coordinator waits for quorum before failing.
        monitor_members: deliver membership changes into user processes.
        min_workers: elastic lower bound on nodes; set together with ``max_workers``. A lost node
            no longer fails the job: the survivors continue while at least this many remain.
        max_workers: elastic upper bound on nodes. Nodes beyond ``workers`` can only come from a
            workload that adds pods: a PyTorchJob (its Worker replicas scale up to it) or a
            StatefulSet (service mode). An Indexed Job has exactly ``workers`` indexes, so it only
            shrinks (a pod replaced after a disruption rejoins under its index): there
            ``max_workers`` must equal ``workers``.
        max_restarts: world restarts after a failure; elastic: each node's failure budget, as torchrun counts.
        backoff_limit: elastic batch jobs: failed pods Kubernetes replaces (each replacement rejoins
            the running world) before it fails the job; ``None`` = 3. The Indexed Job's
            ``backoffLimit`` (failed pods; evictions, preemptions and node drains are not counted)
            or the PyTorchJob's ``runPolicy.backoffLimit`` (container restarts, under
            ``restartPolicy: OnFailure``). A fixed-size job fails on its first pod failure (its
            ``max_restarts`` restarts the world inside the pods instead), so it takes no
            ``backoff_limit``; neither does a service job, whose StatefulSet always replaces pods.
        active_deadline_seconds: batch only: seconds the job may run before Kubernetes stops it
            (the Indexed Job's ``activeDeadlineSeconds``, the PyTorchJob's
            ``runPolicy.activeDeadlineSeconds``); more than ``quorum_timeout``, so a world that
            cannot form is reported by the agent, not cut off. A service job's StatefulSet has no
            deadline: it runs until the stack removes it.
        ttl_seconds_after_finished: batch only: seconds before a finished job is deleted.
        gang_scheduler: ``none``, ``volcano``, ``scheduler-plugins`` or ``kueue``.
        queue: Volcano queue, or the existing Kueue LocalQueue to submit to.
        cluster_queue: Kueue only: create a LocalQueue for this job pointing at this ClusterQueue.
        scheduler_name: pod ``schedulerName``; defaults to the gang scheduler's own.
        namespace: namespace of every object.
        env: extra environment for the agent and the user processes.
        pythonpath: directories in the image (absolute paths) put on the agent's and every user
            process's PYTHONPATH, after the runtime bundle; in service mode, where the modules of
            the called functions live (e.g. ``["/app/examples"]``).
        labels: extra labels on every object and pod.
        node_selector: pod ``nodeSelector``.
        tolerations: pod tolerations (Kubernetes Toleration dicts), added to the GPU toleration.
        service_account: pod service account; ``None`` mounts no API token.
        grace_period: seconds the agent gives its processes between SIGTERM and SIGKILL when the
            pod stops (a rank's checkpoint-on-SIGTERM must fit in it); the pod's
            ``terminationGracePeriodSeconds`` covers it plus the agent's own shutdown.
        shm_size: size limit of the memory-backed ``/dev/shm``, a quantity; ``None`` = no limit
            (the pod's memory limit still applies).
        working_dir: container working directory (absolute); ``None`` keeps the image's.
        image_pull_policy: ``Always``, ``IfNotPresent`` or ``Never``; ``None`` = Kubernetes default.
        agent_port: the agent's HTTP port (TCP).
        master_port: the torch.distributed rendezvous port on node 0 (TCP), and the base of the ports
            the job counts up from it, up to ``master_port + 63 + procs per pod`` (rendezvous per
            generation, JAX coordinator, TensorFlow workers), which must end below 65536 and leave
            out ``agent_port``.
        log_dir: where the agent writes per-process logs in the pod (absolute); ``None`` = its default.
        allow_from: extra NetworkPolicy peers (NetworkPolicyPeer dicts) admitted to the agent port,
            e.g. the namespace a client calls from; the job's own pods are always admitted.
        cluster_domain: the cluster's DNS domain, for the FQDN outputs.

    Every field is a plain Python value (no ``pulumi.Output``): the job is checked at preview,
    before outputs resolve.

    Raises:
        InvalidJobArgs: on construction, for the first field that is invalid.
    """

    image: str
    script: Optional[str] = None
    module: Optional[str] = None
    command: Optional[Sequence[str]] = None
    args: Sequence[str] = ()
    workers: int = 1
    num_proc: Union[int, str] = 1
    cpus: Optional[float] = None
    memory: Optional[str] = None
    gpus: int = 0
    distribution: str = "spmd"
    mode: str = "batch"
    backend: Optional[str] = None
    quorum_workers: Optional[int] = None
    quorum_timeout: float = 300.0
    monitor_members: bool = True
    min_workers: Optional[int] = None
    max_workers: Optional[int] = None
    max_restarts: int = 0
    backoff_limit: Optional[int] = None
    active_deadline_seconds: Optional[int] = None
    ttl_seconds_after_finished: Optional[int] = None
    gang_scheduler: str = NO_GANG
    queue: Optional[str] = None
    cluster_queue: Optional[str] = None
    scheduler_name: Optional[str] = None
    namespace: str = "default"
    env: Mapping[str, str] = field(default_factory=dict)
    pythonpath: Sequence[str] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: Sequence[Mapping[str, Any]] = ()
    service_account: Optional[str] = None
    shm_size: Optional[str] = None
    grace_period: float = DEFAULT_GRACE_PERIOD
    working_dir: Optional[str] = None
    image_pull_policy: Optional[str] = None
    agent_port: int = contract.AGENT_PORT
    master_port: int = contract.DEFAULT_MASTER_PORT
    log_dir: Optional[str] = None
    allow_from: Sequence[Mapping[str, Any]] = ()
    cluster_domain: str = "cluster.local"
    daemon_args: Sequence[str] = ()

    def __post_init__(self) -> None:
        """Freeze the collections and validate every field.

        Raises:
            InvalidJobArgs: the first invalid field, with its value and the fix.
        """
        for f in fields(self):
            checks.require_plain(f.name, getattr(self, f.name), _plain_type(str(f.type)))
        for name in ("env", "labels", "node_selector"):
            value = getattr(self, name)
            if isinstance(value, Mapping):
                object.__setattr__(self, name, MappingProxyType(dict(value)))
        for name in ("command", "args", "pythonpath", "tolerations", "allow_from", "daemon_args"):
            value = getattr(self, name)
            if isinstance(value, (list, tuple)):
                object.__setattr__(self, name, tuple(value))
        _validate_program(self)
        _validate_size(self)
        _validate_modes(self)
        _validate_elastic(self)
        _validate_restarts(self)
        _validate_scheduling(self)
        _validate_pod(self)
        _validate_network(self)
        _validate_single_controller(self)
        _validate_port_block(self)

    @property
    def workload_backend(self) -> str:
        """The backend to render: ``backend`` or the mode's default."""
        if self.backend is not None:
            return self.backend
        return STATEFULSET if self.mode == "service" else INDEXED_JOB

    @property
    def procs_per_node(self) -> int:
        """Processes per node, with ``"auto"`` resolved to the GPU count."""
        return self.gpus if self.num_proc == "auto" else int(self.num_proc)

    @property
    def quorum(self) -> int:
        """Nodes needed to start: ``quorum_workers`` or every worker."""
        return self.workers if self.quorum_workers is None else self.quorum_workers

    @property
    def elastic(self) -> bool:
        """Whether ``min_workers``/``max_workers`` are set."""
        return self.min_workers is not None

    @property
    def max_nodes(self) -> int:
        """The most pods the job can ever have: ``max_workers`` when elastic, else ``workers``."""
        return self.max_workers if self.max_workers is not None else self.workers

    @property
    def pod_backoff_limit(self) -> int:
        """Failed pods the workload replaces before Kubernetes fails the job: ``backoff_limit`` (or
        :data:`DEFAULT_BACKOFF_LIMIT`) when elastic, 0 for a fixed-size job."""
        if not self.elastic:
            return 0
        return DEFAULT_BACKOFF_LIMIT if self.backoff_limit is None else self.backoff_limit

    @property
    def no_python(self) -> bool:
        """Whether the entrypoint is a ``command`` run as is rather than under the interpreter."""
        return self.command is not None

    @property
    def ray_start_args(self) -> tuple[str, ...]:
        """``ray``: what every pod's ``ray start`` gets beyond the agent's own flags: the pod's share
        of CPUs and GPUs (Ray would otherwise count the whole machine's), then ``daemon_args``."""
        derived = [f"--num-cpus={max(1, int(self.cpus))}"] if self.cpus is not None else []
        if self.gpus:
            derived.append(f"--num-gpus={self.gpus}")
        return (*derived, *self.daemon_args)

    @property
    def entrypoint(self) -> tuple[str, ...]:
        """The user command as the agent's ``TRAINPLANE_ENTRYPOINT`` wants it: after the interpreter
        (``script args`` or ``-m module args``), or the whole argv of a ``command`` (then
        :attr:`no_python`); empty for a service job."""
        if self.command is not None:
            return (*self.command, *self.args)
        if self.script is None and self.module is None:
            return ()
        head = (self.script,) if self.script is not None else ("-m", str(self.module))
        return (*head, *self.args)


def validate_job_name(name: str, args: DistributedJobArgs) -> None:
    """Check the job name: a plain RFC 1035 label short enough for every name derived from it.

    Derived names: Indexed Job pod host names ``<name>-<index>`` (63 characters), StatefulSet
    revision-hash labels ``<name>-<hash>`` (the name at most 52), PyTorchJob pods and Services
    ``<name>-worker-<index>`` and ``<name>-master-0`` (63, the operator's DNS-1035 rule).

    Raises:
        InvalidJobArgs: the name is not a plain str, breaks the rule, or is too long for ``args``;
            the message names the derived name that would overflow.
    """
    checks.require_plain("name", name, "str")
    checks.require_dns1035("name", name, max_length=None)
    derived = longest_derived_name(name, args)
    if derived.length > validate.MAX_LABEL:
        raise InvalidJobArgs("name", name, f"the {derived.kind} {derived.text!r} would be {derived.length} "
                             f"characters; Kubernetes allows {validate.MAX_LABEL}",
                             f"shorten name to at most {max_name_length(args)} characters")


@dataclass(frozen=True)
class DerivedName:
    """The longest name Kubernetes derives from a job name, which must stay a 63-character label.

    Attributes:
        kind: what it names, e.g. ``"pod host name"``.
        text: the name, with ``<hash>`` standing for a part Kubernetes generates.
        length: its length in characters, generated parts at their longest.
    """

    kind: str
    text: str
    length: int


def longest_derived_name(name: str, args: DistributedJobArgs) -> DerivedName:
    """The longest label-limited name derived from job ``name`` for ``args``' backend."""
    backend = args.workload_backend
    if backend == STATEFULSET:
        return DerivedName("StatefulSet controller-revision-hash label", f"{name}-<hash>",
                           len(name) + STATEFULSET_HASH_SUFFIX)
    if backend == PYTORCHJOB:
        top = args.max_nodes - 1 if args.elastic else max(args.workers - 2, 0)
        text = f"{name}-worker-{top}"
        return DerivedName("PyTorchJob pod and Service name", text, len(text))
    text = f"{name}-{args.max_nodes - 1}"
    return DerivedName("pod host name", text, len(text))


def max_name_length(args: DistributedJobArgs) -> int:
    """The longest job name whose derived names still fit, characters."""
    return validate.MAX_LABEL - longest_derived_name("", args).length


def _validate_program(a: DistributedJobArgs) -> None:
    if not isinstance(a.image, str) or not a.image or any(c.isspace() for c in a.image):
        raise InvalidJobArgs("image", a.image, "must be a non-empty image reference without spaces",
                             'pass e.g. "python:3.11-slim"')
    if a.command is not None:
        _validate_command(a)
    if a.script is not None and a.module is not None:
        raise InvalidJobArgs("script", a.script, f"exactly one of script and module is needed (module="
                             f"{a.module!r})", "set script to a .py path or module to a dotted module name")
    entry = next(((n, getattr(a, n)) for n in ("command", "script", "module") if getattr(a, n) is not None), None)
    if a.mode == "service":
        if entry is not None:
            raise InvalidJobArgs(entry[0], entry[1], "service mode runs no entrypoint: its processes serve calls",
                                 f"unset {entry[0]}; call functions through the client "
                                 "(runtime.client.JobClient or runtime.workflow)")
        if a.args:
            raise InvalidJobArgs("args", a.args, "service mode runs no entrypoint to pass them to",
                                 "unset args; pass arguments in the calls")
    elif entry is None:
        raise InvalidJobArgs("script", a.script, "a batch job needs a script, a module or a command to run",
                             'set script to a .py path, module to a dotted module name or command to an argv, '
                             'or use mode="service"')
    if a.script is not None and (not isinstance(a.script, str) or not a.script):
        raise InvalidJobArgs("script", a.script, "must be a non-empty path", 'pass e.g. "train.py"')
    if a.module is not None and (not isinstance(a.module, str) or not MODULE_NAME.match(a.module)):
        raise InvalidJobArgs("module", a.module, "not a dotted module name", 'pass e.g. "pkg.train"')
    _require_strings("args", a.args, "must be a list of strings", 'quote numbers: ["--epochs", "3"]')


def _validate_command(a: DistributedJobArgs) -> None:
    command = a.command
    _require_strings("command", command, "must be a list of strings: the executable, then its arguments",
                     'pass e.g. ["bash", "-c", "echo $RANK"]')
    if not command or not command[0]:
        raise InvalidJobArgs("command", command, "names no executable",
                             'put the executable first, e.g. ["/opt/train", "--epochs", "3"]')
    other = next(((n, getattr(a, n)) for n in ("script", "module") if getattr(a, n) is not None), None)
    if other is not None:
        raise InvalidJobArgs("command", command, f"is run instead of a script or module ({other[0]}={other[1]!r})",
                             f"unset {other[0]} (command runs its argv directly), or unset command")


def _validate_size(a: DistributedJobArgs) -> None:
    checks.require_int("workers", a.workers, 1)
    checks.require_int("gpus", a.gpus, 0)
    if a.num_proc == "auto":
        if a.gpus == 0:
            raise InvalidJobArgs("num_proc", a.num_proc, "'auto' means one process per GPU but gpus=0",
                                 "set gpus >= 1 or give num_proc as an int")
    else:
        checks.require_int("num_proc", a.num_proc, 1)
    if a.cpus is not None:
        checks.require_positive_number("cpus", a.cpus)
    if a.memory is not None:
        checks.require_quantity("memory", a.memory)
    if a.shm_size is not None:
        checks.require_quantity("shm_size", a.shm_size)


def _validate_modes(a: DistributedJobArgs) -> None:
    checks.require_choice("distribution", a.distribution, DISTRIBUTIONS)
    checks.require_choice("mode", a.mode, MODES)
    if a.backend is not None:
        checks.require_choice("backend", a.backend, BACKENDS)
    backend = a.workload_backend
    if a.mode == "service" and backend != STATEFULSET:
        raise InvalidJobArgs("backend", backend, "service mode needs a long-running backend; "
                             "Jobs and PyTorchJobs end when their processes exit",
                             f'use backend="{STATEFULSET}" (or leave backend unset)')
    if a.mode == "batch" and backend == STATEFULSET:
        raise InvalidJobArgs("backend", backend, "a StatefulSet restarts its pods forever, so a batch "
                             "job would never finish",
                             f'use "{INDEXED_JOB}" or "{PYTORCHJOB}", or mode="service"')
    if not isinstance(a.monitor_members, bool):
        raise InvalidJobArgs("monitor_members", a.monitor_members, "must be a bool", "pass True or False")
    checks.require_int("max_restarts", a.max_restarts, 0)
    checks.require_positive_number("quorum_timeout", a.quorum_timeout)
    checks.require_positive_number("grace_period", a.grace_period)
    for name, minimum in (("active_deadline_seconds", 1), ("ttl_seconds_after_finished", 0)):
        value = getattr(a, name)
        if value is None:
            continue
        if a.mode != "batch":
            what = ("a service job's StatefulSet has no deadline: it runs until the stack removes it"
                    if name == "active_deadline_seconds" else "a service job's StatefulSet never finishes")
            raise InvalidJobArgs(name, value, f"applies to batch jobs only; {what}",
                                 "unset it in service mode (end the job with pulumi destroy, or give the "
                                 "calls a deadline)")
        checks.require_int(name, value, minimum)
    deadline = a.active_deadline_seconds
    if deadline is not None and deadline <= a.quorum_timeout:
        raise InvalidJobArgs("active_deadline_seconds", deadline, f"Kubernetes would stop the job before its "
                             f"quorum_timeout={a.quorum_timeout:g} s runs out, cutting off the agent's report of "
                             "the nodes that never registered",
                             f"use more than {a.quorum_timeout:g} seconds, or lower quorum_timeout")


def _validate_restarts(a: DistributedJobArgs) -> None:
    """``backoff_limit`` belongs to elastic batch jobs (see :attr:`DistributedJobArgs.pod_backoff_limit`)."""
    if a.backoff_limit is None:
        return
    checks.require_int("backoff_limit", a.backoff_limit, 0)
    if a.mode == "service":
        raise InvalidJobArgs("backoff_limit", a.backoff_limit, "a service job's StatefulSet always replaces "
                             "its pods", "unset backoff_limit")
    if not a.elastic:
        raise InvalidJobArgs("backoff_limit", a.backoff_limit, "a fixed-size job fails on its first pod "
                             "failure (max_restarts restarts its world inside the pods)",
                             "unset backoff_limit, or make the job elastic with min_workers and max_workers")


def _validate_elastic(a: DistributedJobArgs) -> None:
    if a.quorum_workers is not None:
        checks.require_int("quorum_workers", a.quorum_workers, 1)
        if a.quorum_workers > a.workers:
            raise InvalidJobArgs("quorum_workers", a.quorum_workers, f"exceeds workers={a.workers}, so "
                                 "quorum could never be met", f"use at most {a.workers}")
    if a.quorum_workers is not None and a.min_workers is None and a.quorum_workers < a.workers:
        raise InvalidJobArgs("quorum_workers", a.quorum_workers, f"a fixed-size job starts with the first "
                             f"{a.quorum_workers} nodes and refuses the other {a.workers - a.quorum_workers}: their "
                             "agents exit 3, which fails the job on Kubernetes",
                             f"unset quorum_workers (wait for all {a.workers}), or make the job elastic with "
                             f"min_workers <= {a.quorum_workers} and max_workers >= {a.workers}")
    if (a.min_workers is None) != (a.max_workers is None):
        raise InvalidJobArgs("min_workers" if a.max_workers is None else "max_workers",
                             a.min_workers if a.max_workers is None else a.max_workers,
                             "elastic bounds come in pairs",
                             "set both min_workers and max_workers, or neither")
    if a.min_workers is None or a.max_workers is None:
        return
    checks.require_int("min_workers", a.min_workers, 1)
    checks.require_int("max_workers", a.max_workers, 1)
    if a.min_workers > a.max_workers:
        raise InvalidJobArgs("min_workers", a.min_workers, f"exceeds max_workers={a.max_workers}",
                             "make min_workers <= max_workers")
    if not a.min_workers <= a.workers <= a.max_workers:
        raise InvalidJobArgs("workers", a.workers, f"outside min_workers..max_workers = "
                             f"{a.min_workers}..{a.max_workers}", "start with a node count inside the bounds")
    if a.quorum_workers is not None and a.quorum_workers < a.min_workers:
        raise InvalidJobArgs("quorum_workers", a.quorum_workers, f"the world would form with fewer nodes than "
                             f"min_workers={a.min_workers}, the fewest it may run with",
                             f"use a quorum_workers of at least {a.min_workers}, or lower min_workers")
    if a.workload_backend == INDEXED_JOB and a.max_workers > a.workers:
        raise InvalidJobArgs("max_workers", a.max_workers, f"an Indexed Job has exactly workers={a.workers} "
                             "pods, so it can shrink to min_workers but never grow",
                             f'set max_workers={a.workers}, or use backend="{PYTORCHJOB}" (its Workers scale '
                             f'up to max_workers), or mode="service" (a {STATEFULSET})')


def _validate_scheduling(a: DistributedJobArgs) -> None:
    checks.require_choice("gang_scheduler", a.gang_scheduler, GANG_SCHEDULERS)
    if a.queue is not None:
        checks.require_dns1123_subdomain("queue", a.queue)
    if a.cluster_queue is not None:
        checks.require_dns1123_subdomain("cluster_queue", a.cluster_queue)
        if a.gang_scheduler != KUEUE:
            raise InvalidJobArgs("cluster_queue", a.cluster_queue, "is a Kueue setting",
                                 f'set gang_scheduler="{KUEUE}" or unset cluster_queue')
    if a.gang_scheduler == KUEUE and a.max_nodes > a.workers:
        why = (f"Kueue's StatefulSet webhook keeps replicas at {a.workers} while it manages the job (it allows "
               "scaling only to and from 0)" if a.workload_backend == STATEFULSET else
               f"Kueue admitted {a.workers} Worker replicas; a resized PyTorchJob no longer matches its admitted "
               "Workload, which Kueue evicts")
        raise InvalidJobArgs("max_workers", a.max_workers, f"the job could never grow past workers={a.workers}: "
                             f"{why}", f"set max_workers={a.workers} (the job may still shrink to min_workers), "
                             "or use another gang_scheduler")
    if a.gang_scheduler == KUEUE and (a.queue is None) == (a.cluster_queue is None):
        raise InvalidJobArgs("queue", a.queue, "Kueue needs exactly one of queue (an existing LocalQueue) "
                             f"and cluster_queue (cluster_queue={a.cluster_queue!r})",
                             "set queue to a LocalQueue in the namespace, or cluster_queue to a ClusterQueue")
    if a.queue is not None and a.gang_scheduler in (NO_GANG, SCHEDULER_PLUGINS):
        raise InvalidJobArgs("queue", a.queue, f"gang_scheduler={a.gang_scheduler!r} has no queues",
                             f'unset queue, or use gang_scheduler="{VOLCANO}" or "{KUEUE}"')
    if a.scheduler_name is not None:
        checks.require_dns1123_subdomain("scheduler_name", a.scheduler_name)


def _validate_pod(a: DistributedJobArgs) -> None:
    checks.require_dns1123_label("namespace", a.namespace)
    if not isinstance(a.env, Mapping):
        raise InvalidJobArgs("env", a.env, "must be a mapping of names to values", "pass a dict")
    for key, value in a.env.items():
        checks.require_env_name(f"env[{key!r}]", key)
        if key in PROCESS_ENV or key.startswith(RESERVED_ENV_PREFIX):
            if key == "PYTHONPATH":
                fix = "list the directories to import from in pythonpath"
            elif key in SETTING_FIELDS:
                fix = f"set the DistributedJobArgs field {SETTING_FIELDS[key]} instead"
            else:
                fix = "use the matching DistributedJobArgs field instead"
            raise InvalidJobArgs(f"env[{key!r}]", value, "is set by trainplane", f"remove it; {fix}")
        if not isinstance(value, str):
            raise InvalidJobArgs(f"env[{key!r}]", value, "environment values are strings", "quote it")
    checks.require_labels("labels", a.labels)
    for key in a.labels:
        if key in OWNED_LABELS:
            raise InvalidJobArgs(f"labels[{key!r}]", a.labels[key], "is set by trainplane", "remove it")
    checks.require_labels("node_selector", a.node_selector)
    _require_list("tolerations", a.tolerations)
    for i, toleration in enumerate(a.tolerations):
        if not isinstance(toleration, Mapping) or not set(toleration) <= TOLERATION_KEYS:
            raise InvalidJobArgs(f"tolerations[{i}]", toleration, "not a Kubernetes Toleration",
                                 f"use a dict with keys from {sorted(TOLERATION_KEYS)}")
    if a.service_account is not None:
        checks.require_dns1123_subdomain("service_account", a.service_account)
    for name in ("working_dir", "log_dir"):
        if getattr(a, name) is not None:
            checks.require_absolute_path(name, getattr(a, name))
    if not isinstance(a.pythonpath, tuple):
        raise InvalidJobArgs("pythonpath", a.pythonpath, "must be a list of directories",
                             'pass a list such as ["/app/examples"]')
    for i, directory in enumerate(a.pythonpath):
        checks.require_absolute_path(f"pythonpath[{i}]", directory)
        if ":" in directory:
            raise InvalidJobArgs(f"pythonpath[{i}]", directory, "contains ':', the PYTHONPATH separator",
                                 "give each directory as its own list item")
    if a.image_pull_policy is not None:
        checks.require_choice("image_pull_policy", a.image_pull_policy, PULL_POLICIES)


def _validate_network(a: DistributedJobArgs) -> None:
    for name in ("agent_port", "master_port"):
        checks.require_int(name, getattr(a, name), 1)
        if getattr(a, name) > 65535:
            raise InvalidJobArgs(name, getattr(a, name), "is not a TCP port", "use 1..65535")
    if a.agent_port == a.master_port:
        raise InvalidJobArgs("master_port", a.master_port, "equals agent_port", "give them different ports")
    _require_list("allow_from", a.allow_from)
    for i, peer in enumerate(a.allow_from):
        if not isinstance(peer, Mapping) or not peer or not set(peer) <= PEER_KEYS:
            raise InvalidJobArgs(f"allow_from[{i}]", peer, "not a NetworkPolicyPeer",
                                 f"use a dict with keys from {sorted(PEER_KEYS)}")
    checks.require_dns1123_subdomain("cluster_domain", a.cluster_domain)


def _plain_type(annotation: str) -> str:
    """A field's annotation as a plain type to name in a message: ``Optional[Sequence[str]]`` ->
    ``list[str]``, ``Union[int, str]`` -> ``int or str``."""
    text = annotation
    if text.startswith("Optional["):
        text = text[len("Optional["):-1]
    if text.startswith("Union["):
        text = " or ".join(part.strip() for part in text[len("Union["):-1].split(","))
    return text.replace("Sequence[", "list[").replace("Mapping[", "dict[")


def _validate_single_controller(a: DistributedJobArgs) -> None:
    _require_strings("daemon_args", a.daemon_args, "must be a list of strings",
                     'pass e.g. ["--object-store-memory=2000000000"]')
    dist = a.distribution
    if a.daemon_args and dist != "ray":
        raise InvalidJobArgs("daemon_args", list(a.daemon_args), f"they go to `ray start`, and distribution is "
                             f"{dist!r}", 'unset daemon_args, or use distribution="ray"')
    if dist not in SINGLE_CONTROLLER:
        return
    if a.procs_per_node != 1:
        raise InvalidJobArgs("num_proc", a.num_proc, f"a {dist} job runs one driver process, on node 0, and "
                             f"{dist}'s own workers on every pod, which use all of the pod's GPUs",
                             "set num_proc=1")
    if a.elastic:
        raise InvalidJobArgs("min_workers", a.min_workers, f"a {dist} job cannot be elastic: its head is node 0 "
                             "and the driver runs there", "unset min_workers and max_workers")
    for name, port in controller.ports(dist, a.master_port):  # inside the port block (_validate_port_block)
        if port == a.agent_port:
            raise InvalidJobArgs("agent_port", a.agent_port, f"{dist} listens there ({name}: master_port + "
                                 f"{port - a.master_port})", "give agent_port another port")


def _validate_port_block(a: DistributedJobArgs) -> None:
    """The ports counted up from ``master_port`` (rendezvous per generation, JAX, TensorFlow; see
    ``contract.RENDEZVOUS_PORT_SPAN``) fit below 65536 and leave ``agent_port`` out. Each pod has its
    own address, so the TensorFlow block counts one pod's processes."""
    reserved = reserved_ports(a.procs_per_node)
    last = a.master_port + reserved - 1
    if last > 65535:
        raise InvalidJobArgs("master_port", a.master_port, f"the job uses {reserved} ports from it (rendezvous, "
                             f"JAX, TensorFlow), up to {last}, beyond the last TCP port",
                             f"use a master_port of at most {65536 - reserved}")
    if a.master_port <= a.agent_port <= last:
        raise InvalidJobArgs("agent_port", a.agent_port, f"inside the ports the job counts up from master_port "
                             f"({a.master_port}..{last}: rendezvous, JAX, TensorFlow)",
                             f"give agent_port a port below {a.master_port} or above {last}")


def _require_strings(name: str, value: Any, problem: str, fix: str) -> None:
    """Raise :class:`InvalidJobArgs` for ``name`` unless ``value`` is a list (frozen to a tuple) of strings."""
    if not isinstance(value, tuple) or not all(isinstance(x, str) for x in value):
        raise InvalidJobArgs(name, value, problem, fix)


def _require_list(name: str, value: Any) -> None:
    if not isinstance(value, tuple):
        raise InvalidJobArgs(name, value, "must be a list of dicts", "pass a list (or tuple)")
