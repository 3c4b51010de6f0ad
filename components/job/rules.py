"""The checks across ``DistributedJobArgs`` fields, run when the args are built (``__post_init__``), after each
field's own: the job spec's (``runtime.agent.spec.job``) on the shared settings, then what Kubernetes adds.

A field that takes a ``pulumi.Input`` is looked at here only for whether it is set."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from components.capabilities import GANG_SCHEDULERS, KUEUE, NO_GANG, SCHEDULER_PLUGINS, VOLCANO
from components.errors import InvalidJobArgs
from components.job import checks, platform, trainjob_rules
from components.job.backends import BACKENDS, INDEXED_JOB, PYTORCHJOB, STATEFULSET
from components.validate import require
from runtime.agent.errors import SpecError
from runtime.agent.spec.job import SINGLE_CONTROLLER
from runtime.agent.spec.ports import framework_ports, known_port, port_block, reserved_ports

if TYPE_CHECKING:
    from components.job.args import DistributedJobArgs

PULL_POLICIES = ("Always", "IfNotPresent", "Never")
MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def validate(a: DistributedJobArgs) -> None:
    """Every check across fields, in order.

    Raises:
        InvalidJobArgs: the first that fails, naming the field, its value and the fix.
    """
    _validate_program(a)
    _validate_size(a)
    trainjob_rules.validate(a)
    _validate_shared(a)
    _validate_modes(a)
    _validate_elastic(a)
    _validate_restarts(a)
    _validate_scheduling(a)
    _validate_pod(a)
    _validate_network(a)
    _validate_single_controller(a)
    _validate_port_block(a)
    platform.validate(a)


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
    checks.require_strings("command", command, "must be a list of strings: the executable, then its arguments",
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
    end; a field carries the setting's name, so the spec's words need no translation. ``master_port`` first as
    every node must know it (``ports.known_port``, as the agent checks it): the spec's own check takes 0, a
    free port where the job starts on one machine."""
    require("master_port", a.master_port, known_port, InvalidJobArgs)
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
    """What Kubernetes adds to the spec's elastic rules (which include the quorum's): both bounds, a
    workload that can grow to ``max_workers``."""
    if (a.min_workers is None) != (a.max_workers is None):
        raise InvalidJobArgs("min_workers" if a.max_workers is None else "max_workers",
                             a.min_workers if a.max_workers is None else a.max_workers,
                             "elastic bounds come in pairs",
                             "set both min_workers and max_workers, or neither")
    if a.min_workers is None or a.max_workers is None:
        return
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
    checks.require_port("agent_port", a.agent_port)
    if a.agent_port == a.master_port:
        raise InvalidJobArgs("master_port", a.master_port, "equals agent_port", "give them different ports")
    checks.require_dns1123_subdomain("cluster_domain", a.cluster_domain)


def _validate_single_controller(a: DistributedJobArgs) -> None:
    """The ports a single-controller framework listens on leave ``agent_port`` out (the spec checks the rest)."""
    dist = a.distribution
    if dist not in SINGLE_CONTROLLER:
        return
    for name, port in framework_ports(dist, a.master_port):  # inside the port block (_validate_port_block)
        if port == a.agent_port:
            raise InvalidJobArgs("agent_port", a.agent_port, f"{dist} listens there ({name}: master_port + "
                                 f"{port - a.master_port})", "give agent_port another port")


def _validate_port_block(a: DistributedJobArgs) -> None:
    """The ports counted up from ``master_port`` (rendezvous per generation, JAX, TensorFlow; see
    ``contract.RENDEZVOUS_PORT_SPAN``) fit below 65536 and leave ``agent_port`` out. Each pod has its
    own address, so the TensorFlow block counts one pod's processes."""
    beyond = port_block(a.master_port, a.procs_per_node)
    if beyond is not None:
        problem, fix = beyond
        raise InvalidJobArgs("master_port", a.master_port, problem, fix.format(master_port="master_port"))
    last = a.master_port + reserved_ports(a.procs_per_node) - 1
    if a.master_port <= a.agent_port <= last:
        raise InvalidJobArgs("agent_port", a.agent_port, f"inside the ports the job counts up from master_port "
                             f"({a.master_port}..{last}: rendezvous, JAX, TensorFlow)",
                             f"give agent_port a port below {a.master_port} or above {last}")
