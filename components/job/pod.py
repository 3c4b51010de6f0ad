"""The pod every backend runs: the agent as the container command, its env contract, volumes and resources."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional

import pulumi

from components import grace
from components.gpu import gpu_toleration
from components.job.args import DistributedJobArgs
from components.job.bundle import RuntimeBundle
from components.job.gang import GangPlacement
from components.job.naming import JobNames
from components.job.platform import platform_pod_spec, pod_annotations
from components.job.volumes import BUNDLE_VOLUME, SHM_PATH, SHM_VOLUME
from components.outputs import Labels, lift, merged
from runtime.agent import contract
from runtime.agent.spec.env_writer import job_env
from runtime.agent.spec.job import JobSpec
from runtime.agent.spec.ports import framework_ports

AGENT_CONTAINER = "agent"
TOKEN_KEY = "token"  # noqa: S105 - the Secret's key, not a secret
ISTIO_INJECT_LABEL = "sidecar.istio.io/inject"
BUNDLE_DIGEST_ANNOTATION = "trainplane.dev/bundle-sha256"
MANAGED_BY = "pulumi"
NODE_COMPONENT = "node"
READ_ONLY_MODE = 0o444
AGENT_COMMAND = ("python3", "-m", contract.AGENT_MODULE)
SIZE_SETTINGS = (contract.WORKERS, contract.QUORUM_WORKERS)
"""Settings an elastic StatefulSet's pods read from the job's size ConfigMap rather than their template."""


@dataclass(frozen=True)
class PodRole:
    """The parts of a pod that differ between backends.

    Attributes:
        restart_policy: ``Never`` for an Indexed Job, ``Always`` for a StatefulSet; ``None`` leaves it
            unset (a PyTorchJob's replica ``restartPolicy`` decides, and the operator warns about a pod
            template that sets one: kubeflow/trainer v1.9.4 ``pkg/controller.v1/common/pod.go``).
        container_name: the agent container's name (the training operator requires ``pytorch``).
        rendezvous_port_name: name of the ``master_port`` container port (the operator reads its own).
        subdomain: pod ``subdomain`` (Indexed Jobs: the headless Service, so pods get DNS names).
        set_master_port: whether to set ``MASTER_PORT`` (the operator sets it when there is a Master).
        node_rank_from: ``valueFrom`` of ``TRAINPLANE_NODE_RANK``, when the rank comes from a label.
        probes: readiness and liveness probes on the agent's ``/healthz`` (service mode).
        size_from: the ConfigMap that holds the job's size settings (:data:`SIZE_SETTINGS`), when the
            pods read them from it: an elastic StatefulSet, so that a resize adds or removes pods
            instead of rolling every pod for a changed template.
        entrypoint_as_args: the user's entrypoint goes in the container's ``args`` (after the agent's
            command) instead of ``TRAINPLANE_ENTRYPOINT`` (a TrainJob's ``trainer.args``).
    """

    restart_policy: Optional[str]
    container_name: str = AGENT_CONTAINER
    rendezvous_port_name: str = contract.MASTER_PORT_NAME
    subdomain: Optional[str] = None
    set_master_port: bool = True
    node_rank_from: Optional[Mapping[str, Any]] = None
    probes: bool = False
    size_from: Optional[str] = None
    entrypoint_as_args: bool = False


def common_labels(names: JobNames, args: DistributedJobArgs, component: str) -> Labels:
    """The ``app.kubernetes.io/*`` labels, the job label and the user's labels (an Output when the user's
    labels are one)."""
    return merged(args.labels, {
        contract.LABEL_NAME: contract.APP_NAME,
        contract.LABEL_INSTANCE: names.job,
        contract.LABEL_COMPONENT: component,
        contract.LABEL_PART_OF: contract.APP_NAME,
        contract.LABEL_MANAGED_BY: MANAGED_BY,
        contract.LABEL_JOB: names.job,
    })


def pod_selector(names: JobNames) -> dict[str, str]:
    """Labels that select exactly the job's pods."""
    return {contract.LABEL_JOB: names.job, contract.LABEL_COMPONENT: NODE_COMPONENT}


def cpu_quantity(cores: float) -> str:
    """Cores as a Kubernetes CPU quantity: ``2`` for 2.0, ``500m`` for 0.5."""
    return str(int(cores)) if float(cores).is_integer() else f"{round(cores * 1000)}m"


def size_settings(args: DistributedJobArgs) -> dict[str, str]:
    """The settings that change when the job is resized: worker count and quorum."""
    return {contract.WORKERS: str(args.workers), contract.QUORUM_WORKERS: str(args.quorum)}


def termination_grace_seconds(args: DistributedJobArgs) -> int:
    """The pod's ``terminationGracePeriodSeconds``: the agent's grace period plus
    ``components.grace.AGENT_STOP_MARGIN``, whole seconds."""
    return grace.termination_grace_seconds(args.grace_period)


DEADLINE_REPORT_MARGIN = 30
"""Seconds before ``activeDeadlineSeconds`` that the agents end a job themselves (their ``timeout``,
counted from the coordinator's start), so the report of the ranks still running is printed before
Kubernetes kills the pods, as long as the coordinator's pod started within this margin of the Job."""


def agent_deadline(active_deadline_seconds: int) -> float:
    """The agents' ``timeout`` for a Job whose ``activeDeadlineSeconds`` is given: that less
    :data:`DEADLINE_REPORT_MARGIN`, or half of it when it is shorter than twice the margin."""
    return active_deadline_seconds - min(DEADLINE_REPORT_MARGIN, active_deadline_seconds / 2)


def job_spec(names: JobNames, args: DistributedJobArgs, entrypoint: tuple[str, ...]) -> JobSpec:
    """The job spec the arguments describe, for the one writer of the agent's environment
    (``runtime.agent.spec.env_writer``): ``args.spec`` with the job's name, ``entrypoint`` (``args.entrypoint``
    resolved, an Output when ``args.args`` is one), for ``ray`` every pod's ``ray start`` arguments
    (:attr:`~components.job.args.DistributedJobArgs.ray_start_args`), and the agents' time limit
    (:func:`agent_deadline`)."""
    deadline = args.active_deadline_seconds
    return replace(args.spec, job_name=names.job, entrypoint=entrypoint,
                   daemon_args=args.ray_start_args if args.distribution == "ray" else (),
                   timeout=None if deadline is None else agent_deadline(deadline))


def agent_env(names: JobNames, args: DistributedJobArgs, role: PodRole) -> pulumi.Input[list[dict[str, Any]]]:
    """The agent's environment: downward API, the bundle path, the token, the job's settings (written
    by ``runtime.agent.spec.env_writer``, as the local launcher writes them), where the coordinator
    is, then the user's env. An Output when ``pythonpath``, ``args`` or ``env`` is one."""

    def env_list(pythonpath: tuple[str, ...], entrypoint: tuple[str, ...], user: Mapping[str, str]) -> list:
        env: list[dict[str, Any]] = [
            _field_env(contract.POD_IP, "status.podIP"),
            _field_env(contract.POD_NAME, "metadata.name"),
            _field_env(contract.POD_NAMESPACE, "metadata.namespace"),
            {"name": "PYTHONPATH", "value": ":".join((contract.BUNDLE_MOUNT_PATH, *pythonpath))},
            {"name": contract.TOKEN,
             "valueFrom": {"secretKeyRef": {"name": names.token_secret, "key": TOKEN_KEY}}},
        ]
        settings = job_env(job_spec(names, args, tuple(entrypoint)))
        if not role.set_master_port:
            settings.pop(contract.MASTER_PORT)  # the training operator sets it
        for key in SIZE_SETTINGS if role.size_from is not None else ():
            settings.pop(key, None)
            env.append({"name": key, "valueFrom": {"configMapKeyRef": {"name": role.size_from, "key": key}}})
        if names.coordinator_env is not None:  # a PyTorchJob's agents find the operator's MASTER_ADDR instead
            settings[contract.COORDINATOR_HOST] = names.coordinator_env
        if names.peers is not None:  # every node's host name: how a replaced pod finds the current coordinator
            settings[contract.PEERS] = names.peers
        if role.entrypoint_as_args:  # the container's args carry it (a TrainJob's trainer.args)
            settings.pop(contract.ENTRYPOINT, None)
        settings[contract.AGENT_PORT_SETTING] = str(args.agent_port)
        env += [{"name": key, "value": value} for key, value in settings.items()]
        if role.node_rank_from is not None:
            env.append({"name": contract.NODE_RANK_SETTING, "valueFrom": dict(role.node_rank_from)})
        return env + [{"name": k, "value": v} for k, v in user.items()]

    return lift(env_list, args.pythonpath, args.entrypoint, args.env)


def resources(args: DistributedJobArgs) -> dict[str, dict[str, Any]]:
    """Requests and limits: CPU requested only (no throttling), memory requested and capped, GPUs limited."""
    requests: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    if args.cpus is not None:
        requests["cpu"] = cpu_quantity(args.cpus)
    if args.memory is not None:
        requests["memory"] = limits["memory"] = args.memory
    if args.gpus > 0:
        limits[contract.GPU_RESOURCE] = str(args.gpus)
    return {k: v for k, v in (("requests", requests), ("limits", limits)) if v}


def container(names: JobNames, args: DistributedJobArgs, role: PodRole) -> dict[str, Any]:
    """The one container: ``python3 -m runtime.agent`` with the bundle and ``/dev/shm`` mounted; its
    ports are the agent's, the rendezvous port and, for ``ray``/``monarch``, the framework's."""
    body: dict[str, Any] = {
        "name": role.container_name,
        "image": args.image,
        "command": list(AGENT_COMMAND),
        "env": agent_env(names, args, role),
        "ports": [
            {"name": contract.AGENT_PORT_NAME, "containerPort": args.agent_port, "protocol": "TCP"},
            {"name": role.rendezvous_port_name, "containerPort": args.master_port, "protocol": "TCP"},
            *({"name": name, "containerPort": port, "protocol": "TCP"}
              for name, port in framework_ports(args.distribution, args.master_port)),
        ],
        "volumeMounts": [
            {"name": BUNDLE_VOLUME, "mountPath": contract.BUNDLE_MOUNT_PATH, "readOnly": True},
            {"name": SHM_VOLUME, "mountPath": SHM_PATH},
        ],
    }
    limits = resources(args)
    if limits:
        body["resources"] = limits
    if args.working_dir is not None:
        body["workingDir"] = args.working_dir
    if args.image_pull_policy is not None:
        body["imagePullPolicy"] = args.image_pull_policy
    if role.probes:
        probe = {"httpGet": {"path": contract.ROUTE_HEALTHZ, "port": contract.AGENT_PORT_NAME}}
        body["readinessProbe"] = {**probe, "periodSeconds": 5, "failureThreshold": 3}
        body["livenessProbe"] = {**probe, "periodSeconds": 10, "failureThreshold": 6}
    return body


def volumes(names: JobNames, args: DistributedJobArgs, bundle: RuntimeBundle) -> list[dict[str, Any]]:
    """The runtime bundle laid out by ``items``, and a memory-backed ``/dev/shm``."""
    shm: dict[str, Any] = {"medium": "Memory"}
    if args.shm_size is not None:
        shm["sizeLimit"] = args.shm_size
    return [
        {"name": BUNDLE_VOLUME, "configMap": {
            "name": names.runtime_configmap,
            "items": [dict(item) for item in bundle.items],
            "defaultMode": READ_ONLY_MODE,
        }},
        {"name": SHM_VOLUME, "emptyDir": shm},
    ]


def tolerations(args: DistributedJobArgs) -> pulumi.Input[list[dict[str, Any]]]:
    """The user's tolerations, plus the GPU node taint's when the pod asks for GPUs (an Output when the
    user's are one)."""
    gpu = [gpu_toleration()] if args.gpus > 0 else []
    return lift(lambda given: [*(dict(t) for t in given), *gpu], args.tolerations)


def pod_template(
    names: JobNames, args: DistributedJobArgs, role: PodRole, bundle: RuntimeBundle, gang: GangPlacement
) -> dict[str, Any]:
    """The PodTemplateSpec every backend uses, varied by ``role`` and ``gang``.

    Pods carry the job labels (plus the gang's), Istio injection off, and the bundle digest as an
    annotation so a changed agent rolls the workload; the spec goes through
    :func:`~components.job.platform.platform_pod_spec` (volumes, identity, secrets by reference, EFA).
    """
    labels = merged(common_labels(names, args, NODE_COMPONENT), gang.pod_labels, {ISTIO_INJECT_LABEL: "false"})
    spec: dict[str, Any] = {
        "containers": [container(names, args, role)],
        "volumes": volumes(names, args, bundle),
        "enableServiceLinks": False,
        "automountServiceAccountToken": args.service_account is not None,
        "terminationGracePeriodSeconds": termination_grace_seconds(args),
    }
    optional = {
        "restartPolicy": role.restart_policy,
        "serviceAccountName": args.service_account,
        "schedulerName": gang.scheduler_name,
        "subdomain": role.subdomain,
        "nodeSelector": _present(args.node_selector),
        "tolerations": _present(tolerations(args)),
    }
    spec.update({k: v for k, v in optional.items() if v is not None})
    return {
        "metadata": {
            "labels": labels,
            "annotations": {BUNDLE_DIGEST_ANNOTATION: bundle.digest, **pod_annotations(), **gang.pod_annotations},
        },
        "spec": platform_pod_spec(names, args, spec),
    }


def _present(value: Any) -> Any:
    """A collection for the pod spec, or ``None`` (left out) when it is plain and empty. An Output is kept:
    its emptiness is not known when the spec is rendered, and an empty ``nodeSelector`` or
    ``tolerations`` means the same to Kubernetes as none."""
    if isinstance(value, pulumi.Output):
        return value
    return (dict(value) if isinstance(value, Mapping) else list(value)) or None


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}
