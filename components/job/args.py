"""``DistributedJobArgs``: what to run and how, validated on construction.

Every check raises :class:`~components.errors.InvalidJobArgs` naming the field, the value and the fix, so a
bad stack config fails at ``pulumi preview`` instead of as a pod stuck in Pending. The settings a job shares
with the launcher, ``LocalJobSpec`` and the computes (:data:`SHARED`) take their default, their checks and
their documentation from the one job spec (``runtime.agent.spec.job``). A field that takes a ``pulumi.Input``
has a check of its own (``components.job.inputchecks``), run at once on a plain value and when known on an
Output (``components.outputs``); the checks across fields (``components.job.rules``: the spec's, then what
Kubernetes adds) look at such a field only to see whether it is set.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Any, Callable, Mapping, Optional, Sequence, Union, cast

import pulumi

from components import arguments, docs, outputs
from components.capabilities import NO_GANG
from components.errors import InvalidJobArgs
from components.job import access, checks, inputchecks, rules, volumes
from components.job.backends import INDEXED_JOB, STATEFULSET
from runtime.agent import contract
from runtime.agent.spec.job import SETTINGS, JobSpec, default

DEFAULT_BACKOFF_LIMIT = 3
"""Failed pods of an elastic batch job that Kubernetes replaces before it fails the job."""

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
    ``allow_from``, ``volumes``, ``volume_mounts``, ``secret_env``, ``secret_values``, ``image_pull_secrets``,
    ``iam_role_arn``, ``eks_cluster_name``) may hold another resource's outputs at any depth: a plain value is
    checked at once, an unresolved one is kept as one ``pulumi.Output`` that runs the same check when Pulumi knows its
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
    """Workload kind: ``indexed-job``, ``pytorchjob`` or ``trainjob`` (a Kubeflow Trainer v2 TrainJob on trainplane's
    ClusterTrainingRuntime, ``TrainerV2``) for batch, ``statefulset`` for service; unset picks ``indexed-job`` for
    batch and ``statefulset`` for service."""
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
    endpoint). A secret Output is refused (it would be a plain ``value`` in the pod spec): pass secrets in
    ``secret_values`` or ``secret_env``."""
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

    volumes: pulumi.Input[Sequence[pulumi.Input[Mapping[str, Any]]]] = ()
    """Pod volumes in Kubernetes' own shape (``core/v1`` Volume: a ``name`` and one source), e.g.
    ``{"name": "data", "persistentVolumeClaim": {"claimName": "imagenet"}}``, ``{"name": "scratch", "emptyDir":
    {"sizeLimit": "200Gi"}}``, a ``configMap``, a ``secret`` or a ``csi`` volume; mounted by ``volume_mounts``."""
    volume_mounts: pulumi.Input[Sequence[pulumi.Input[Mapping[str, Any]]]] = ()
    """Where the agent's container (and so every rank) mounts them: ``core/v1`` VolumeMount objects (``name``,
    ``mountPath``, ``readOnly``, ``subPath``...)."""
    claims: Sequence[Mapping[str, Any]] = ()
    """PersistentVolumeClaims the job creates, as templates (``metadata.name``, ``spec``: ``accessModes``,
    ``storageClassName``, ``resources.requests.storage``), under their own names in the job's namespace; a volume
    mounts one by ``persistentVolumeClaim.claimName``. Every pod, replaced or added, mounts the same claim."""
    checkpoint_dir: Optional[str] = None
    """An absolute path where every pod mounts ``checkpoint_claim``; every rank finds it in ``CHECKPOINT_DIR``."""
    checkpoint_claim: Optional[str] = None
    """The ReadWriteMany claim mounted at ``checkpoint_dir``: one of ``claims`` or an existing claim."""
    claim_retention: str = "Delete"
    """What ``pulumi destroy`` (or removing the job) does to ``claims``: ``Delete`` them, and their volumes with
    them under a ``Delete`` reclaim policy, or ``Retain`` them in the cluster
    (``persistentVolumeClaimRetentionPolicy``'s terms), e.g. for checkpoints; a retained claim is mounted again as
    an existing claim, not created."""
    secret_env: pulumi.Input[Mapping[str, pulumi.Input[Mapping[str, Any]]]] = field(default_factory=dict)
    """Variables read from existing Secrets: name to a SecretKeySelector (``{"name": <Secret>, "key": <key>}``),
    rendered as ``valueFrom.secretKeyRef``, so the value is never in the pod template."""
    secret_values: pulumi.Input[Mapping[str, pulumi.Input[str]]] = field(default_factory=dict)
    """Variables whose values (e.g. secret Outputs) the job keeps in its own Secret, ``<job>-env``, and passes by
    ``secretKeyRef``: the pod template holds only the reference and the value stays a Pulumi secret."""
    image_pull_secrets: pulumi.Input[Sequence[pulumi.Input[str]]] = ()
    """Names of ``kubernetes.io/dockerconfigjson`` Secrets in the job's namespace, for a private registry."""
    iam_role_arn: Optional[pulumi.Input[str]] = None
    """An IAM role for the pods: the job creates a ServiceAccount named after itself, bound to the role by
    ``iam_binding``; the pods get the role's credentials from the EKS webhook."""
    iam_binding: str = "pod-identity"
    """``pod-identity`` (an EKS Pod Identity association; the role trusts ``pods.eks.amazonaws.com``) or ``irsa``
    (the ServiceAccount's ``eks.amazonaws.com/role-arn``; the role trusts the cluster's OIDC provider)."""
    eks_cluster_name: Optional[pulumi.Input[str]] = None
    """The EKS cluster of the pod identity association (the EKS stack sets it)."""
    efa: int = 0
    """EFA interfaces per pod (``vpc.amazonaws.com/efa``), with ``hugepages-2Mi`` and ``FI_PROVIDER=efa``; a pod
    that owns its node asks for all of them (32 on ``p5.48xlarge``). Needs ``memory`` and, on a stack, an EFA
    ``node_group``."""
    node_group: Optional[str] = None
    """The GPU node group the pods run on (its ``trainplane.dev/node-group`` label); a stack checks that it exists
    and has EFA when ``efa`` is set."""

    def __post_init__(self) -> None:
        """Freeze the collections and validate every field; keep each unresolved Input as one checked Output.

        Raises:
            InvalidJobArgs: the first invalid field, with its value and the fix.
        """
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name not in INPUT_FIELDS:
                checks.require_plain(f.name, value, _plain_type(str(f.type)))
                object.__setattr__(self, f.name, inputchecks.frozen(value))
            elif outputs.unresolved(value):
                object.__setattr__(self, f.name, outputs.checked(value, INPUT_CHECKS[f.name]))
            else:
                object.__setattr__(self, f.name, INPUT_CHECKS[f.name](value))
        rules.validate(self)

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
        unset: ``components.job.pod.job_spec`` completes it for the agent's environment.

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


SHARED = tuple(f.name for f in fields(DistributedJobArgs) if f.name in SETTINGS)
"""The fields that are job spec settings (``runtime.agent.spec.job.SETTINGS``), in declaration order: their
defaults, checks and descriptions are the spec's."""
SETTING_FIELDS = {**{SETTINGS[name].env: name for name in SHARED}, contract.AGENT_PORT_SETTING: "agent_port"}
"""The agent setting each such field sets, by environment variable, for the fix of a user ``env`` that sets one."""
INPUT_CHECKS: dict[str, Callable[[Any], Any]] = {
    **inputchecks.CHECKS, **access.CHECKS, "volumes": volumes.check_volumes, "volume_mounts": volumes.check_mounts,
    "env": inputchecks.env_check(SETTING_FIELDS)}
"""The check of each field that takes a ``pulumi.Input`` (``components.job.inputchecks``)."""
INPUT_FIELDS = frozenset(INPUT_CHECKS)
"""The fields that take a ``pulumi.Input``; every other field must be plain (see :class:`DistributedJobArgs`)."""


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


def _plain_type(annotation: str) -> str:
    """A field's annotation as a plain type to name in a message: ``Optional[Sequence[str]]`` ->
    ``list[str]``, ``Union[int, str]`` -> ``int or str``."""
    text = annotation
    if text.startswith("Optional["):
        text = text[len("Optional["):-1]
    if text.startswith("Union["):
        text = " or ".join(part.strip() for part in text[len("Union["):-1].split(","))
    return text.replace("Sequence[", "list[").replace("Mapping[", "dict[")


