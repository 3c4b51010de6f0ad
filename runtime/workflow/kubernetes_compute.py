"""``KubernetesCompute``: deploy a service-mode ``DistributedJob`` with the Pulumi Automation API and call it.

::

    compute = KubernetesCompute(image="registry/trainer:1", cpus=4, gpus=1, memory="16Gi",
                                namespace="research").distribute("pytorch", workers=4, num_proc=1)
    train = fn(train).to(compute)     # pulumi up (or reattach), port-forward to node 0, wait until running
    train(epochs=3)                   # one result per rank
    train.teardown()                  # pulumi destroy; leaving the job up instead lets the next run reattach

Deploying (:meth:`KubernetesCompute.deploy`, i.e. ``fn(...).to(compute)``):

1. The job is named ``name``, or ``<user>-<function>`` after the first function deployed (as
   Kubetorch names its services); its stack has the same name (:mod:`runtime.workflow.stacks`).
2. If the stack exists and its ``spec`` output is the digest of this very job
   (:func:`runtime.workflow.program.spec_digest`), the driver **reattaches**: no update. Otherwise
   it runs ``pulumi up`` with the inline program (:mod:`runtime.workflow.program`): a first run
   creates the job, a changed one (another size, image, agent version) updates it.
3. It reads the token from the stack's outputs and opens a local :class:`~runtime.workflow.portforward.Relay`
   to node 0's agent (pod ``<job>-0``, the agent port) through the API server's port-forward, with
   the ``kubernetes`` client and the same kubeconfig and context (no kubectl).
4. It waits until the coordinator reports a running world of the wanted size (pods may still be
   pulling their image, or rolling after an update).

Calls then travel the relay. :meth:`~runtime.workflow.compute.Compute.teardown` closes the relay and
destroys the stack; a driver that exits without tearing down leaves the job running, and the next
run reattaches. ``RemoteFunction.to(other)`` with another ``KubernetesCompute`` of the same job name
(another ``workers``) updates the same stack instead of destroying it: a resize is a stack update.
The job is elastic (1 to ``resize_limit`` nodes) unless ``job_args`` bounds it or its gang
scheduler is Kueue, so a resize changes only the StatefulSet's replicas and the job's size
ConfigMap: pods are added or removed, the others keep running with their state, and the new world
is the next call's.

The called functions' code comes from the caller with every call (``codesync``): the image needs
only what the code imports; ``pythonpath`` adds directories in the image for code that is there.
"""

from __future__ import annotations

import getpass
import re
import sys
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence, cast

from runtime.agent import contract
from runtime.agent.errors import ConfigError
from runtime.agent.spec.job import SINGLE_CONTROLLER, default
from runtime.agent.spec.wire import JSON
from runtime.workflow.attach import Expectation, JobShape, wait_until_serving
from runtime.workflow.compute import Compute, DeployRequest, Endpoint, resize_limit_of
from runtime.workflow.errors import DeployError
from runtime.workflow.objects import Look, Vanishing, gone, look_with
from runtime.workflow.portforward import Connector, Relay, pod_connector
from runtime.workflow.stacks import AutomationStacks, Stacks

RESIZE_LIMIT = 16
"""The most pods a job can be resized to in place, unless ``resize_limit`` says otherwise."""
KUBERNETES_READY_TIMEOUT = 600.0
"""Seconds a job's pods may take to serve after ``pulumi up`` (scheduling, image pull, a rolling update)."""
OWN_ARGUMENTS = frozenset({"image", "cpus", "gpus", "memory", "namespace", "workers", "num_proc", "distribution",
                           "mode", "pythonpath", "env"})
"""``DistributedJobArgs`` fields ``KubernetesCompute`` sets from its own arguments; ``job_args`` may not."""
ConnectorFactory = Callable[[str, str, int], Connector]
"""``(namespace, pod, port) -> Connector``: how the relay reaches node 0's agent."""


class KubernetesCompute(Compute):
    """A service-mode job on a Kubernetes cluster, deployed as a Pulumi stack of its own.

    Args:
        image: the container image; it needs ``python3`` (3.9+) and whatever the called functions
            import; the agent is mounted from a ConfigMap.
        cpus: CPU request per pod, cores; ``None`` requests nothing.
        gpus: NVIDIA GPUs per pod (``nvidia.com/gpu``).
        memory: memory request and limit per pod, e.g. ``"16Gi"``.
        namespace: the namespace of every object.
        kubeconfig: path of the kubeconfig file; ``None`` for ``$KUBECONFIG`` or ``~/.kube/config``.
        workers: nodes (pods).
        num_proc: processes per pod.
        distribution: see :class:`~runtime.workflow.compute.Compute`.
        serialization: see :class:`~runtime.workflow.compute.Compute`.
        context: the kubeconfig context; ``None`` for its current one.
        name: the job's (and stack's) name, a DNS-1035 label; ``None``: ``<user>-<function>`` after the
            first function deployed.
        pythonpath: directories in the image (absolute) to import from besides the caller's code.
        env: further environment for the agents and processes.
        job_args: further ``DistributedJobArgs`` fields, e.g. ``{"gang_scheduler": "volcano",
            "queue": "research"}`` or ``{"node_selector": {...}, "tolerations": [...]}``.
        ready_timeout: seconds the pods may take to serve after an update, >= 0.
        resize_limit: the most pods the job can be resized to in place (its elastic bound,
            ``DistributedJobArgs.max_workers``; the pod
            template carries it, so changing it rolls every pod).
        stacks: the stacks seam (default :class:`~runtime.workflow.stacks.AutomationStacks`: the
            Pulumi Automation API with a local file backend and a passphrase).
        connector: ``(namespace, pod, port) -> Connector`` (default: the ``kubernetes`` client's
            port-forward with this kubeconfig and context).
        look: ``(namespace, job) -> JobObjects``, whether the job's objects exist (default: asked of
            the API server with this kubeconfig and context; :mod:`runtime.workflow.objects`).

    Raises:
        ConfigError: an argument is invalid (checked here, before anything is deployed); names it.
    """

    def __init__(self, image: str, *, cpus: Optional[float] = None, gpus: int = 0, memory: Optional[str] = None,
                 namespace: str = "default", kubeconfig: Optional[str] = None, workers: int = default("workers"),
                 num_proc: int = default("num_proc"), distribution: str = default("distribution"),
                 serialization: str = JSON, context: Optional[str] = None,
                 name: Optional[str] = None, pythonpath: Sequence[str] = (), env: Optional[Mapping[str, str]] = None,
                 job_args: Optional[Mapping[str, Any]] = None, ready_timeout: float = KUBERNETES_READY_TIMEOUT,
                 stacks: Optional[Stacks] = None, connector: Optional[ConnectorFactory] = None,
                 resize_limit: int = RESIZE_LIMIT, look: Optional[Look] = None) -> None:
        super().__init__(workers, num_proc, distribution, serialization)
        self.resize_limit = resize_limit_of(resize_limit)
        if kubeconfig is not None and not Path(kubeconfig).expanduser().is_file():
            raise ConfigError(f"kubeconfig={kubeconfig!r} is invalid: no such file; pass the path of a kubeconfig, "
                              "or None for $KUBECONFIG or ~/.kube/config")
        if ready_timeout < 0:
            raise ConfigError(f"ready_timeout={ready_timeout!r} is invalid: use 0 or more seconds")
        clash = sorted(OWN_ARGUMENTS & set(job_args or {}))
        if clash:
            raise ConfigError(f"job_args={dict(job_args or {})!r} is invalid: it sets {', '.join(clash)}, which "
                              "KubernetesCompute takes as its own arguments; pass them there")
        self.image = image
        self.cpus = cpus
        self.gpus = gpus
        self.memory = memory
        self.namespace = namespace
        self.kubeconfig = None if kubeconfig is None else str(Path(kubeconfig).expanduser().resolve())
        self.context = context
        self.name = name
        self.pythonpath = tuple(pythonpath)
        self.env = dict(env or {})
        self.extra_args = dict(job_args or {})
        self.ready_timeout = ready_timeout
        self.stacks = stacks
        self.connector = connector
        self.look = look
        self._client: Any = None
        self.job_name: Optional[str] = None
        """The running job's name (its stack's), once deployed."""
        self.last_deploy: Optional[str] = None
        """What the last deployment did: ``created`` or ``updated`` (a ``pulumi up``), or ``reattached``."""
        self._relay: Optional[Relay] = None
        self._check()

    def distributed_job_args(self) -> Any:
        """The ``components.DistributedJobArgs`` this compute deploys (service mode).

        Raises:
            ConfigError: they are invalid; the message names the field and the fix.
        """
        from components.errors import InvalidJobArgs
        from components.job import DistributedJobArgs

        extra = dict(self.extra_args)
        resizable = (self.distribution not in SINGLE_CONTROLLER and extra.get("gang_scheduler") != "kueue"
                     and "min_workers" not in extra and "max_workers" not in extra)
        if resizable:
            extra.update(min_workers=1, max_workers=max(self.resize_limit, self.workers))
        try:
            return DistributedJobArgs(image=self.image, cpus=self.cpus, gpus=self.gpus, memory=self.memory,
                                      namespace=self.namespace, workers=self.workers, num_proc=self.num_proc,
                                      distribution=self.distribution, mode="service", pythonpath=self.pythonpath,
                                      env=self.env, **extra)
        except InvalidJobArgs as exc:
            raise ConfigError(str(exc)) from exc
        except TypeError as exc:
            raise ConfigError(f"job_args={self.extra_args!r} is invalid: {exc}; use DistributedJobArgs "
                              "field names") from exc

    def distribute(self, distribution: str, workers: Optional[int] = None, num_proc: Optional[int] = None) -> Compute:
        """See :meth:`Compute.distribute`; the copy's job arguments are checked at once.

        Raises:
            ConfigError: the job's arguments are invalid at this size or distribution.
        """
        other = cast(KubernetesCompute, super().distribute(distribution, workers, num_proc))
        other._relay = None
        other.job_name = other.last_deploy = None
        other._check()
        return other

    def describe(self) -> str:
        """This compute as a short constructor call, for messages."""
        return (f"KubernetesCompute(image={self.image!r}, workers={self.workers}, num_proc={self.num_proc}, "
                f"namespace={self.namespace!r})")

    def continues(self, previous: Compute) -> bool:
        """Whether ``previous`` runs this compute's job (same job name): then deploying updates its stack."""
        if not isinstance(previous, KubernetesCompute) or previous.job_name is None:
            return False
        return self.name in (None, previous.job_name)

    def release(self) -> None:
        """Close the port-forward and forget the job, which keeps running (its stack stays)."""
        self._close_relay()
        super().release()

    def destroy(self) -> None:
        """Destroy the job's stack, deployed by this process or an earlier one (by ``name``).

        Raises:
            ConfigError: nothing is deployed here and no ``name`` says which job to destroy.
            DeployError: ``pulumi destroy`` failed.
        """
        if self.running:
            self.teardown()
            return
        if self.name is None:
            raise ConfigError("name=None: destroy() of a job this process did not deploy needs its name "
                              "(e.g. KubernetesCompute(..., name='alice-train').destroy())")
        self._stacks().destroy(self.name)

    def _check(self) -> None:
        args = self.distributed_job_args()
        if self.name is not None:
            self._validate_name(self.name, args)

    @staticmethod
    def _validate_name(name: str, args: Any) -> None:
        from components.errors import InvalidJobArgs
        from components.job.naming import validate_job_name

        try:
            validate_job_name(name, args)
        except InvalidJobArgs as exc:
            raise ConfigError(str(exc)) from exc

    def _stacks(self) -> Stacks:
        if self.stacks is None:
            self.stacks = AutomationStacks()
        return self.stacks

    def _start(self, request: DeployRequest) -> Endpoint:
        """Deploy or reattach the job's stack, open the port-forward, wait until the job serves.

        Raises:
            ConfigError: the job's name is invalid, or no kubeconfig is usable.
            DeployError: a stack operation failed, or the stack lacks the program's outputs.
            Unauthorized, RendezvousError: as :func:`~runtime.workflow.attach.wait_until_serving`.
        """
        from components.job.naming import max_name_length
        from runtime.workflow import program

        args = self.distributed_job_args()
        name = self.name or default_job_name(request.function, max_name_length(args))
        self._validate_name(name, args)
        cluster = program.ClusterAccess(self.kubeconfig, self.context)
        connector_for = self._connect_factory()
        stacks = self._stacks()
        outputs = stacks.outputs(name)
        vanished = None
        if outputs and outputs.get(program.SPEC) == program.spec_digest(name, args, cluster):
            vanished = self._vanished(name, str(outputs.get(program.NAMESPACE, args.namespace)))
            self.last_deploy = "reattached"
        if vanished is not None:
            _say(f"job {name}: {vanished}; refreshing its stack and deploying it again")
            self.last_deploy = "redeployed"
            outputs = self._redeploy(stacks, name, program.job_program(name, args, cluster), vanished)
        elif self.last_deploy != "reattached" or not outputs:
            self.last_deploy = "updated" if outputs else "created"
            outputs = stacks.up(name, program.job_program(name, args, cluster))
        missing = [key for key in program.OUTPUTS if key not in outputs]
        if missing:
            raise DeployError(name, "outputs", f"stack {name!r} has no output {', '.join(missing)} after "
                                               "`pulumi up`: it was not made by KubernetesCompute's program; "
                                               "destroy it or choose another name")
        namespace, pod = str(outputs[program.NAMESPACE]), str(outputs[program.COORDINATOR_POD])
        port, token = int(outputs[program.AGENT_PORT]), str(outputs[program.TOKEN])
        _say(f"job {name} in namespace {namespace}: {self.last_deploy}; port-forward to pod {pod}:{port}")
        relay = Relay(connector_for(namespace, pod, port), describe=f"pod {pod}:{port} in {namespace}")
        try:
            wait_until_serving(relay.url, token, self.serialization, self.ready_timeout,
                               self._expectation(name, namespace, args, relay))
        except BaseException:
            relay.close()
            raise
        self._relay = relay
        self.job_name = name
        return Endpoint(relay.url, token)

    def _vanished(self, name: str, namespace: str) -> Optional[str]:
        """Why the job of an unchanged stack must be deployed again (its StatefulSet is gone), or ``None``.

        Raises:
            DeployError: its namespace is gone, which the stack does not make: says what to run.
        """
        objects = self._look()(namespace, name)
        why = gone(objects, namespace, name)
        if objects.namespace is False:
            raise DeployError(name, "up", f"job {name}: {why}. KubernetesCompute does not make namespaces: create it "
                                          f"(kubectl create namespace {namespace}) and run the driver again, which "
                                          f"deploys the job afresh (pulumi up --refresh); or remove the job's stack "
                                          f"with KubernetesCompute(..., name={name!r}).destroy()")
        return why

    @staticmethod
    def _redeploy(stacks: Stacks, name: str, job_program: Callable[[], None], vanished: str) -> Mapping[str, Any]:
        """``pulumi up --refresh``: the refresh drops what is gone from the stack's state, the update makes it again.

        Raises:
            DeployError: that failed; says what was gone and what to run.
        """
        try:
            return stacks.up(name, job_program, refresh=True)
        except DeployError as exc:
            raise DeployError(name, "up", f"job {name}: {vanished}, and deploying it again (pulumi up --refresh) "
                                          f"failed: {exc}\nfix what it says, then run the driver again; or remove "
                                          f"the job's stack with KubernetesCompute(..., name={name!r}).destroy() "
                                          f"and start afresh") from exc

    def _stop(self) -> None:
        """Close the port-forward and destroy the job's stack."""
        self._close_relay()
        name, self.job_name = self.job_name, None
        if name is not None:
            self._stacks().destroy(name)

    def _close_relay(self) -> None:
        if self._relay is not None:
            self._relay.close()
            self._relay = None

    def _connect_factory(self) -> ConnectorFactory:
        if self.connector is not None:
            return self.connector
        api_client = self._api_client()
        return lambda namespace, pod, port: pod_connector(api_client, namespace, pod, port)

    def _look(self) -> Look:
        if self.look is None:
            self.look = look_with(self._api_client())
        return self.look

    def _api_client(self) -> Any:
        """A ``kubernetes`` API client for this compute's kubeconfig and context (made once)."""
        if self._client is not None:
            return self._client
        from kubernetes import config
        from kubernetes.config.config_exception import ConfigException

        try:
            self._client = config.new_client_from_config(config_file=self.kubeconfig, context=self.context)
        except (ConfigException, OSError) as exc:
            where = "" if self.kubeconfig else " (none given: $KUBECONFIG or ~/.kube/config)"
            raise ConfigError(f"kubeconfig={self.kubeconfig!r}{where} with context={self.context!r} is not usable: "
                              f"{exc}; pass kubeconfig= the path of a kubeconfig for the cluster, and context= one "
                              "of its contexts") from exc
        return self._client

    def _expectation(self, name: str, namespace: str, args: Any, relay: Relay) -> Expectation:
        """Wait for the size deployed: pods of an earlier size may still serve while an update rolls
        (or, resizing an elastic job, while pods are added or removed). A job reattached to, or one
        whose quorum is below its size, may run anywhere within its bounds."""
        procs = args.procs_per_node
        if args.quorum == args.workers and (self.last_deploy != "reattached" or not args.elastic):
            low = high = args.workers
            wanted = f"of {low} nodes x {procs} processes"
        else:
            low, high = args.min_workers or args.quorum, args.max_nodes
            wanted = f"of {low} to {high} nodes x {procs} processes"

        def accepts(shape: JobShape) -> bool:
            return low <= shape.workers <= high and shape.num_proc == procs

        selector = f"{contract.LABEL_JOB}={name}"
        return Expectation(
            accepts=accepts, wanted=wanted, ended_is_final=False, problem=lambda: relay.last_error,
            stop=Vanishing(self._look(), namespace=namespace, job=name, failing=lambda: relay.last_error is not None),
            hint=(f"check the job's pods (kubectl get pods -n {namespace} -l {selector}, and their events: image "
                  "pull, scheduling, a gang scheduler waiting for the whole group); raise ready_timeout if they "
                  "are merely slow"),
        )


def default_job_name(function: str, max_length: int, user: Optional[str] = None) -> str:
    """``<user>-<function>``, made a DNS-1035 label of at most ``max_length`` characters.

    Args:
        function: ``module:qualname`` of the function (its last name part is used).
        max_length: the longest name the job's derived names allow.
        user: the user name (default: the login name).
    """
    if user is None:
        try:
            user = getpass.getuser()
        except (KeyError, OSError):
            user = "user"
    short = function.rsplit(":", 1)[-1].rsplit(".", 1)[-1] or "job"
    label = re.sub(r"-+", "-", re.sub(r"[^a-z0-9]+", "-", f"{user}-{short}".lower())).strip("-")
    if not label[:1].isalpha():
        label = f"job-{label}"
    return label[:max_length].rstrip("-")


def _say(line: str) -> None:
    sys.stderr.write(f"[trainplane] {line}\n")
    sys.stderr.flush()
