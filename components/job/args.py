"""``DistributedJobArgs``: what to run and how, validated on construction.

Every check raises :class:`~components.errors.InvalidJobArgs` naming the field, the value and the
fix, so a bad stack config fails at ``pulumi preview`` instead of as a pod stuck in Pending. The settings a
job shares with the launcher, ``LocalJobSpec`` and the computes (:data:`SHARED`) take their default, their
checks and their documentation from the one job spec (``runtime.agent.spec.job``); the checks here add what
Kubernetes needs on top of it. A field that
takes a ``pulumi.Input`` has a check of its own (:data:`INPUT_CHECKS`), run at once on a plain value and
when known on an Output (``components.outputs``); the checks across fields look at such a field only to
see whether it is set.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from types import MappingProxyType
from typing import Any, Callable, Mapping, Optional, Sequence, Union, cast

import pulumi

from components import arguments, docs, outputs, validate
from components.capabilities import GANG_SCHEDULERS, KUEUE, NO_GANG, SCHEDULER_PLUGINS, VOLCANO
from components.errors import InvalidJobArgs
from components.job import checks
from runtime.agent import contract
from runtime.agent.errors import SpecError
from runtime.agent.execution import controller
from runtime.agent.execution.environment import reserved_ports
from runtime.agent.spec.job import PORT_FIX, SETTINGS, SINGLE_CONTROLLER, JobSpec, default

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
OWNED_LABELS = (
    contract.LABEL_NAME, contract.LABEL_INSTANCE, contract.LABEL_COMPONENT, contract.LABEL_PART_OF,
    contract.LABEL_MANAGED_BY, contract.LABEL_JOB,
)
DEFAULT_BACKOFF_LIMIT = 3
"""Failed pods of an elastic batch job that Kubernetes replaces before it fails the job."""
STATEFULSET_HASH_SUFFIX = 11
"""A StatefulSet's pods carry ``controller-revision-hash: <name>-<hash of up to 10 characters>``, a
63-character label: the name takes at most 52."""


@dataclass(frozen=True)
class DistributedJobArgs:
    """Settings of one distributed training job, validated on construction.

    The fields are the keys of :class:`~components.job.inputs.DistributedJobArgsDict`, documented below
    (:data:`FIELD_DOCS`). The ones every front end shares (:data:`SHARED`: ``workers``, ``num_proc``,
    ``mode``, ``distribution``, the quorum, restarts, elastic bounds, ``master_port``, ``grace_period``,
    ``log_dir``, ``daemon_args``...) take their default, checks and description from the job spec
    (``runtime.agent.spec.job``); the others are this component's own. Fields that take a ``pulumi.Input``
    (:data:`INPUT_FIELDS`: ``image``, ``namespace``, ``args``, ``env``, ``labels``, ``node_selector``,
    ``tolerations``, ``service_account``, ``pythonpath``, ``queue``, ``cluster_queue``, ``scheduler_name``,
    ``allow_from``) may hold another resource's outputs at any depth: a plain value is checked at once,
    an unresolved one is kept as one ``pulumi.Output`` that runs the same check when Pulumi knows its
    value (at preview when it is known then), with the same message. Every other field must be a plain
    value: it decides the shape of what is rendered (objects, workload kind, pod counts, ports, derived
    names, the requests a queue's quota is checked against), which Pulumi must know when the job is
    created.

    Raises:
        InvalidJobArgs: on construction, for the first field that is invalid (for an Output, when its
            value is known).
    """

    image: pulumi.Input[str]
    """Container image; any image with ``python3`` (3.9+) works, the agent is mounted."""
    script: Optional[str] = None
    """Path of the training script inside the image (relative to ``working_dir``), run under the image's ``python3``.
    Batch mode: exactly one of ``script``, ``module`` and ``command``. Service mode runs no entrypoint (the processes
    serve calls): leave all three unset."""
    module: Optional[str] = None
    """Importable module to run as ``python -m module``."""
    command: Optional[Sequence[str]] = None
    """An executable and its arguments, run directly on every rank instead of under Python (torchrun's ``--no-python``),
    e.g. ``["bash", "-c", "..."]`` or ``["/opt/train"]``; looked up on the image's ``PATH``. It gets the same
    environment contract; membership changes are not raised in it (it is not Python): it can read its new world from
    the file named by ``TRAINPLANE_WORLD_FILE``."""
    args: pulumi.Input[Sequence[pulumi.Input[str]]] = ()
    """Arguments appended to the script, module or command (e.g. a data location from a bucket's output)."""
    workers: int = default("workers")
    num_proc: Union[int, str] = default("num_proc")
    """Here also ``"auto"``: one per GPU (needs ``gpus >= 1``)."""
    cpus: Optional[float] = None
    """CPU request per pod, cores (``0.5`` = 500m); unset requests nothing."""
    memory: Optional[str] = None
    """Memory request and limit per pod, a Kubernetes quantity such as ``"16Gi"``."""
    gpus: int = 0
    """NVIDIA GPUs per pod (``nvidia.com/gpu`` limit), a whole number."""
    distribution: str = default("distribution")
    """One of ``spmd``, ``pytorch``, ``jax``, ``tensorflow``, ``ray``, ``monarch``. With ``ray`` or ``monarch``
    (``RAY_ADDRESS``, ``MONARCH_WORKER_ADDRESSES``) the image must have ``ray`` or ``torchmonarch`` installed; they
    need no elastic bounds, and listen on ``master_port + 32`` (and ``+ 33``, Ray's client server),
    which ``agent_port`` must not take. Service calls run on node 0."""
    mode: str = default("mode")
    backend: Optional[str] = None
    """Workload kind: ``indexed-job`` or ``pytorchjob`` for batch, ``statefulset`` for service; unset picks
    ``indexed-job`` for batch and ``statefulset`` for service."""
    quorum_workers: Optional[int] = default("quorum_workers")
    """Below ``workers`` only for an elastic job: a fixed-size one refuses the late nodes, which fails it on
    Kubernetes."""
    quorum_timeout: float = default("quorum_timeout")
    monitor_members: bool = default("monitor_members")
    min_workers: Optional[int] = default("min_workers")
    """Set together with ``max_workers``."""
    max_workers: Optional[int] = default("max_workers")
    """Nodes beyond ``workers`` can only come from a workload that adds pods: a PyTorchJob (its Worker replicas scale
    up to it) or a StatefulSet (service mode). An Indexed Job has exactly ``workers`` indexes, so it only shrinks (a
    pod replaced after a disruption rejoins under its index): there ``max_workers`` must equal ``workers``."""
    max_restarts: int = default("max_restarts")
    backoff_limit: Optional[int] = None
    """Elastic batch jobs: failed pods Kubernetes replaces (each replacement rejoins the running world) before it fails
    the job; unset = 3. The Indexed Job's ``backoffLimit`` (failed pods; evictions, preemptions and node drains are
    not counted) or the PyTorchJob's ``runPolicy.backoffLimit`` (container restarts, under ``restartPolicy:
    OnFailure``). A fixed-size job fails on its first pod failure (its ``max_restarts`` restarts the world inside the
    pods instead), so it takes no ``backoff_limit``; neither does a service job, whose StatefulSet always replaces
    pods."""
    active_deadline_seconds: Optional[int] = None
    """Batch only: seconds the job may run before Kubernetes stops it (the Indexed Job's ``activeDeadlineSeconds``, the
    PyTorchJob's ``runPolicy.activeDeadlineSeconds``); more than ``quorum_timeout``, so a world that cannot form is
    reported by the agent, not cut off. A service job's StatefulSet has no deadline: it runs until the stack removes
    it."""
    ttl_seconds_after_finished: Optional[int] = None
    """Batch only: seconds before a finished job is deleted."""
    gang_scheduler: str = NO_GANG
    """``none``, ``volcano``, ``scheduler-plugins`` or ``kueue``."""
    queue: Optional[pulumi.Input[str]] = None
    """Volcano queue, or the existing Kueue LocalQueue to submit to (e.g. the name of a queue another resource
    created)."""
    cluster_queue: Optional[pulumi.Input[str]] = None
    """Kueue only: create a LocalQueue for this job pointing at this ClusterQueue."""
    scheduler_name: Optional[pulumi.Input[str]] = None
    """Pod ``schedulerName``; unset = the gang scheduler's own."""
    namespace: pulumi.Input[str] = "default"
    """Namespace of every object, e.g. a ``Namespace`` resource's ``metadata.name``. The component is named
    ``<namespace>/<name>`` outside ``default`` when the namespace is a plain string, and after the job alone when it
    is an Output (Pulumi names resources before Outputs resolve): jobs of one name in two namespaces need the
    namespaces given as strings."""
    env: pulumi.Input[Mapping[str, pulumi.Input[str]]] = field(default_factory=dict)
    """Extra environment for the agent and the user processes; values may be other resources' outputs (a database
    endpoint). A secret value stays a secret in Pulumi's state, but is a plain ``value`` in the pod spec."""
    pythonpath: pulumi.Input[Sequence[pulumi.Input[str]]] = ()
    """Directories in the image (absolute paths) put on the agent's and every user process's PYTHONPATH, after the
    runtime bundle; in service mode, where the modules of the called functions live (e.g. ``["/app/examples"]``)."""
    labels: pulumi.Input[Mapping[str, pulumi.Input[str]]] = field(default_factory=dict)
    """Extra labels on every object and pod."""
    node_selector: pulumi.Input[Mapping[str, pulumi.Input[str]]] = field(default_factory=dict)
    """Pod ``nodeSelector`` (e.g. a node group's labels)."""
    tolerations: pulumi.Input[Sequence[pulumi.Input[Mapping[str, Any]]]] = ()
    """Pod tolerations, Kubernetes Toleration objects (``key``, ``operator``, ``value``, ``effect``,
    ``tolerationSeconds``), added to the GPU toleration."""
    service_account: Optional[pulumi.Input[str]] = None
    """Pod service account (e.g. a ``ServiceAccount`` resource's ``metadata.name``); unset mounts no API token."""
    shm_size: Optional[str] = None
    """Size limit of the memory-backed ``/dev/shm``, a quantity; unset = no limit (the pod's memory limit still
    applies)."""
    grace_period: float = default("grace_period")
    """A rank's checkpoint-on-SIGTERM must fit in it; the pod's ``terminationGracePeriodSeconds`` covers it plus the
    agent's own shutdown."""
    working_dir: Optional[str] = None
    """Container working directory (absolute); unset keeps the image's."""
    image_pull_policy: Optional[str] = None
    """``Always``, ``IfNotPresent`` or ``Never``; unset = the Kubernetes default."""
    agent_port: int = contract.AGENT_PORT
    """The agent's HTTP port (TCP)."""
    master_port: int = default("master_port")
    """In a pod, a port from 1 to 65535; the ports counted up from it reach ``master_port + 63 + procs per pod``
    (rendezvous per generation, JAX coordinator, TensorFlow workers), which must end below 65536 and leave out
    ``agent_port``."""
    log_dir: Optional[str] = default("log_dir")
    """An absolute path in the pod."""
    allow_from: pulumi.Input[Sequence[pulumi.Input[Mapping[str, Any]]]] = ()
    """Extra NetworkPolicy peers (NetworkPolicyPeer objects) admitted to the agent port, e.g. the namespace a client
    calls from; the job's own pods are always admitted."""
    cluster_domain: str = "cluster.local"
    """The cluster's DNS domain, for the FQDN outputs."""
    daemon_args: Sequence[str] = default("daemon_args")
    """They follow the ones derived from ``cpus`` (``--num-cpus``) and ``gpus`` (``--num-gpus``), e.g.
    ``["--object-store-memory=2000000000"]``."""

    def __post_init__(self) -> None:
        """Freeze the collections and validate every field; keep each unresolved Input as one checked Output.

        Raises:
            InvalidJobArgs: the first invalid field, with its value and the fix.
        """
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name not in INPUT_FIELDS:
                checks.require_plain(f.name, value, _plain_type(str(f.type)))
                object.__setattr__(self, f.name, _frozen(value))
            elif outputs.unresolved(value):
                object.__setattr__(self, f.name, outputs.checked(value, INPUT_CHECKS[f.name]))
            else:
                object.__setattr__(self, f.name, INPUT_CHECKS[f.name](value))
        _validate_program(self)
        _validate_size(self)
        _validate_shared(self)
        _validate_modes(self)
        _validate_elastic(self)
        _validate_restarts(self)
        _validate_scheduling(self)
        _validate_pod(self)
        _validate_network(self)
        _validate_single_controller(self)
        _validate_port_block(self)

    @classmethod
    def from_inputs(cls, inputs: Mapping[str, Any]) -> DistributedJobArgs:
        """Build the args from a :class:`~components.job.inputs.DistributedJobArgsDict` (or any mapping
        of field names to values), as a Pulumi program in another language passes them: whole-number
        floats are the ints Pulumi carried as floats (``components.arguments``).

        Raises:
            InvalidJobArgs: ``inputs`` is not a mapping, names no ``image`` or a key that is no field,
                or a field is invalid.
        """
        return arguments.from_mapping(cls, inputs, InvalidJobArgs)

    @property
    def workload_backend(self) -> str:
        """The backend to render: ``backend`` or the mode's default."""
        if self.backend is not None:
            return self.backend
        return STATEFULSET if self.mode == "service" else INDEXED_JOB

    @property
    def procs_per_node(self) -> int:
        """Processes per node, with ``"auto"`` resolved to the GPU count."""
        return self.gpus if self.num_proc == "auto" else cast(int, self.num_proc)

    @cached_property
    def spec(self) -> JobSpec:
        """The shared settings as the job spec holds and checks them (``runtime.agent.spec.job``), ``num_proc``
        resolved; its entrypoint is the command without ``args`` (which may be an Output) and its job name
        unset: :func:`job_spec` completes it for the agent's environment.

        Raises:
            SpecError: a shared setting is invalid (``__post_init__`` words it as :class:`InvalidJobArgs`).
        """
        settings = {name: getattr(self, name) for name in SHARED}
        return JobSpec(**{**settings, "num_proc": self.procs_per_node}, entrypoint=self.command_head,
                       no_python=self.no_python)

    @property
    def quorum(self) -> int:
        """Nodes needed to start: ``quorum_workers`` or every worker (the spec's)."""
        return self.spec.quorum

    @property
    def elastic(self) -> bool:
        """Whether ``min_workers``/``max_workers`` are set (the spec's)."""
        return self.spec.elastic

    @property
    def max_nodes(self) -> int:
        """The most pods the job can ever have: ``max_workers`` when elastic, else ``workers`` (the spec's)."""
        return self.spec.max_nodes

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
    def command_head(self) -> tuple[str, ...]:
        """The user command before ``args``: ``script``, ``-m module`` or the ``command``'s argv; empty for a
        service job."""
        if self.command is not None:
            return tuple(self.command)
        if self.script is None and self.module is None:
            return ()
        return (self.script,) if self.script is not None else ("-m", str(self.module))

    @property
    def entrypoint(self) -> pulumi.Input[tuple[str, ...]]:
        """The user command as the agent's ``TRAINPLANE_ENTRYPOINT`` wants it: after the interpreter
        (``script args`` or ``-m module args``), or the whole argv of a ``command`` (then
        :attr:`no_python`); empty for a service job. An Output when ``args`` is one."""
        head = self.command_head
        return outputs.lift(lambda extra: (*head, *extra), self.args) if head else ()


def job_spec(job_name: str, args: DistributedJobArgs, entrypoint: tuple[str, ...]) -> JobSpec:
    """The job spec the arguments describe, for the one writer of the agent's environment
    (``runtime.agent.spec.environment``): ``args.spec`` with the job's name, ``entrypoint`` (``args.entrypoint``
    resolved) and, for ``ray``, every pod's ``ray start`` arguments (:attr:`DistributedJobArgs.ray_start_args`)."""
    daemon_args = args.ray_start_args if args.distribution == "ray" else ()
    return replace(args.spec, job_name=job_name, entrypoint=entrypoint, daemon_args=daemon_args)


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
    checks.require_int("gpus", a.gpus, 0)
    if a.num_proc == "auto" and a.gpus == 0:
        raise InvalidJobArgs("num_proc", a.num_proc, "'auto' means one process per GPU but gpus=0",
                             "set gpus >= 1 or give num_proc as an int")
    if a.cpus is not None:
        checks.require_positive_number("cpus", a.cpus)
    if a.memory is not None:
        checks.require_quantity("memory", a.memory)
    if a.shm_size is not None:
        checks.require_quantity("shm_size", a.shm_size)


def _validate_shared(a: DistributedJobArgs) -> None:
    """The shared settings, each on its own and across each other, as the job spec checks them for every front
    end; a field carries the setting's name, so the spec's words need no translation."""
    try:
        a.spec  # noqa: B018 - building the spec runs its checks
    except SpecError as error:
        problem, fix = error.render(str)
        raise InvalidJobArgs(error.field, getattr(a, error.field), problem, fix) from error


def _validate_modes(a: DistributedJobArgs) -> None:
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
    """What Kubernetes adds to the spec's elastic rules: both bounds, a quorum that a fixed-size job can keep,
    a workload that can grow to ``max_workers``."""
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
    if a.cluster_queue is not None and a.gang_scheduler != KUEUE:
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


def _validate_pod(a: DistributedJobArgs) -> None:
    for name in ("working_dir", "log_dir"):
        if getattr(a, name) is not None:
            checks.require_absolute_path(name, getattr(a, name))
    if a.image_pull_policy is not None:
        checks.require_choice("image_pull_policy", a.image_pull_policy, PULL_POLICIES)


def _validate_network(a: DistributedJobArgs) -> None:
    checks.require_int("agent_port", a.agent_port, 1)
    if a.agent_port > 65535:
        raise InvalidJobArgs("agent_port", a.agent_port, "is not a TCP port", "use 1..65535")
    if a.master_port == 0:
        raise InvalidJobArgs("master_port", a.master_port, "0 picks a free port when a job starts on one machine; "
                             "the pods of a job must know node 0's port in advance", PORT_FIX)
    if a.agent_port == a.master_port:
        raise InvalidJobArgs("master_port", a.master_port, "equals agent_port", "give them different ports")
    checks.require_dns1123_subdomain("cluster_domain", a.cluster_domain)


# --- the fields that take a pulumi.Input: one check each, returning the value as the args keep it ---


def _check_image(value: Any) -> str:
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise InvalidJobArgs("image", value, "must be a non-empty image reference without spaces",
                             'pass e.g. "python:3.11-slim"')
    return value


def _check_args(value: Any) -> tuple[str, ...]:
    frozen = _frozen(value)
    _require_strings("args", frozen, "must be a list of strings", 'quote numbers: ["--epochs", "3"]')
    return frozen


def _check_namespace(value: Any) -> str:
    checks.require_dns1123_label("namespace", value)
    return value


def _check_env(value: Any) -> Mapping[str, str]:
    if not isinstance(value, Mapping):
        raise InvalidJobArgs("env", value, "must be a mapping of names to values", "pass a dict")
    for key, item in value.items():
        checks.require_env_name(f"env[{key!r}]", key)
        if key in PROCESS_ENV or key.startswith(RESERVED_ENV_PREFIX):
            if key == "PYTHONPATH":
                fix = "list the directories to import from in pythonpath"
            elif key in SETTING_FIELDS:
                fix = f"set the DistributedJobArgs field {SETTING_FIELDS[key]} instead"
            else:
                fix = "use the matching DistributedJobArgs field instead"
            raise InvalidJobArgs(f"env[{key!r}]", item, "is set by trainplane", f"remove it; {fix}")
        if not isinstance(item, str):
            raise InvalidJobArgs(f"env[{key!r}]", item, "environment values are strings", "quote it")
    return _frozen(value)


def _check_labels(value: Any) -> Mapping[str, str]:
    checks.require_labels("labels", value)
    for key in value:
        if key in OWNED_LABELS:
            raise InvalidJobArgs(f"labels[{key!r}]", value[key], "is set by trainplane", "remove it")
    return _frozen(value)


def _check_node_selector(value: Any) -> Mapping[str, str]:
    checks.require_labels("node_selector", value)
    return _frozen(value)


def _check_tolerations(value: Any) -> tuple[Mapping[str, Any], ...]:
    frozen = _frozen(value)
    _require_list("tolerations", frozen)
    for i, toleration in enumerate(frozen):
        if not isinstance(toleration, Mapping) or not set(toleration) <= TOLERATION_KEYS:
            raise InvalidJobArgs(f"tolerations[{i}]", toleration, "not a Kubernetes Toleration",
                                 f"use a dict with keys from {sorted(TOLERATION_KEYS)}")
    return frozen


def _check_pythonpath(value: Any) -> tuple[str, ...]:
    frozen = _frozen(value)
    if not isinstance(frozen, tuple):
        raise InvalidJobArgs("pythonpath", value, "must be a list of directories",
                             'pass a list such as ["/app/examples"]')
    for i, directory in enumerate(frozen):
        checks.require_absolute_path(f"pythonpath[{i}]", directory)
        if ":" in directory:
            raise InvalidJobArgs(f"pythonpath[{i}]", directory, "contains ':', the PYTHONPATH separator",
                                 "give each directory as its own list item")
    return frozen


def _check_allow_from(value: Any) -> tuple[Mapping[str, Any], ...]:
    frozen = _frozen(value)
    _require_list("allow_from", frozen)
    for i, peer in enumerate(frozen):
        if not isinstance(peer, Mapping) or not peer or not set(peer) <= PEER_KEYS:
            raise InvalidJobArgs(f"allow_from[{i}]", peer, "not a NetworkPolicyPeer",
                                 f"use a dict with keys from {sorted(PEER_KEYS)}")
    return frozen


def _optional_subdomain(name: str) -> Callable[[Any], Optional[str]]:
    """The check of an optional object name (queue, ClusterQueue, scheduler, service account)."""

    def check(value: Any) -> Optional[str]:
        if value is not None:
            checks.require_dns1123_subdomain(name, value)
        return value

    return check


INPUT_CHECKS: dict[str, Callable[[Any], Any]] = {
    "image": _check_image,
    "args": _check_args,
    "namespace": _check_namespace,
    "env": _check_env,
    "labels": _check_labels,
    "node_selector": _check_node_selector,
    "tolerations": _check_tolerations,
    "pythonpath": _check_pythonpath,
    "allow_from": _check_allow_from,
    **{name: _optional_subdomain(name) for name in ("queue", "cluster_queue", "scheduler_name", "service_account")},
}
"""The check of each field that takes a ``pulumi.Input``: it raises :class:`InvalidJobArgs` for an invalid
value and returns a valid one as the args keep it (collections frozen)."""


INPUT_FIELDS = frozenset(INPUT_CHECKS)
"""The fields that take a ``pulumi.Input``; every other field must be plain (see :class:`DistributedJobArgs`)."""
SHARED = tuple(f.name for f in fields(DistributedJobArgs) if f.name in SETTINGS)
"""The fields that are job spec settings (``runtime.agent.spec.job.SETTINGS``), in declaration order: their
defaults, checks and descriptions are the spec's."""
SETTING_FIELDS = {**{SETTINGS[name].env: name for name in SHARED}, contract.AGENT_PORT_SETTING: "agent_port"}
"""The agent setting each such field sets, by environment variable, for the fix of a user ``env`` that sets one."""


def _field_docs() -> dict[str, str]:
    own = docs.attribute_docs(DistributedJobArgs)
    return {
        f.name: " ".join(filter(None, (docs.sentence(SETTINGS[f.name].doc), own.get(f.name))))
        if f.name in SETTINGS else own[f.name]
        for f in fields(DistributedJobArgs)
    }


FIELD_DOCS = _field_docs()
"""Each field's description: a shared setting's is the spec's doc, followed by what Kubernetes adds (the
docstring under the field, if any); any other field's is its docstring. The package schema and ``help()`` show
these."""
docs.document_fields(DistributedJobArgs, FIELD_DOCS)


def _frozen(value: Any) -> Any:
    """Lists and tuples as tuples, mappings as read-only copies, anything else as is."""
    if isinstance(value, Mapping):
        return MappingProxyType(dict(value))
    if isinstance(value, (list, tuple)):
        return tuple(value)
    return value


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
    """The ports a single-controller framework listens on leave ``agent_port`` out (the spec checks the rest)."""
    dist = a.distribution
    if dist not in SINGLE_CONTROLLER:
        return
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
