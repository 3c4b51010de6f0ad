"""DistributedJobArgs validation: every invalid value, and a job name that is no DNS-1035 label or too long
for the names derived from it, fails naming the field, the value and the fix."""

from __future__ import annotations

from typing import Any

import pytest

from components.errors import InvalidJobArgs
from components.job.naming import max_name_length, validate_job_name
from tests.components.componenttest import job_args
from tests.components.job.jobargerrors import assert_names_field_value_and_fix

pytestmark = pytest.mark.unit

GIVEN = object()
"""Stands for the value passed for the error's field: the error must carry exactly that input."""
LABEL_FIX = "use at most 63 letters, digits, '-', '_' or '.', alphanumeric at both ends"
SUBDOMAIN_FIX = "use dot-separated lower-case labels of letters, digits and '-'"
SERVICE_FIX = "use backend=\"statefulset\" (or leave backend unset)"
NO_ENTRYPOINT = "service mode runs no entrypoint"
CLIENT_FIX = "call functions through the client"

INVALID = [
    # (overrides, field, value (GIVEN: the override of that field), problem fragment, fix fragment)
    ({"image": ""}, "image", GIVEN, "non-empty image reference", 'pass e.g. "python:3.11-slim"'),
    ({"image": "py thon"}, "image", GIVEN, "without spaces", 'pass e.g. "python:3.11-slim"'),
    ({"script": None}, "script", None, "a batch job needs a script, a module or a command to run",
     "set script to a .py path, module to a dotted module name or command to an argv"),
    ({"module": "pkg.train"}, "script", "train.py", "exactly one of script and module",
     "set script to a .py path or module to a dotted module name"),
    ({"script": None, "module": "pkg-train"}, "module", GIVEN, "not a dotted module name", 'pass e.g. "pkg.train"'),
    ({"args": ["--epochs", 3]}, "args", GIVEN, "list of strings", 'quote numbers: ["--epochs", "3"]'),
    ({"args": "--epochs 3"}, "args", GIVEN, "list of strings", 'quote numbers: ["--epochs", "3"]'),
    ({"script": None, "command": []}, "command", GIVEN, "names no executable", "put the executable first"),
    ({"script": None, "command": [""]}, "command", GIVEN, "names no executable", "put the executable first"),
    ({"script": None, "command": "bash -c train"}, "command", GIVEN, "must be a list of strings",
     'pass e.g. ["bash", "-c", "echo $RANK"]'),
    ({"script": None, "command": ["sleep", 5]}, "command", GIVEN, "must be a list of strings",
     'pass e.g. ["bash", "-c", "echo $RANK"]'),
    ({"command": ["/opt/train"]}, "command", GIVEN, "instead of a script or module (script='train.py')",
     "unset script (command runs its argv directly), or unset command"),
    ({"script": None, "module": "pkg.train", "command": ["/opt/train"]}, "command", GIVEN,
     "instead of a script or module (module='pkg.train')", "unset module"),
    ({"mode": "service", "script": "serve.py"}, "script", GIVEN, NO_ENTRYPOINT, f"unset script; {CLIENT_FIX}"),
    ({"mode": "service", "module": "pkg.serve"}, "module", GIVEN, NO_ENTRYPOINT, f"unset module; {CLIENT_FIX}"),
    ({"mode": "service", "command": ["/opt/serve"]}, "command", GIVEN, NO_ENTRYPOINT, f"unset command; {CLIENT_FIX}"),
    ({"mode": "service", "args": ["--port", "1"]}, "args", GIVEN, "no entrypoint to pass them to",
     "unset args; pass arguments in the calls"),
    # The shared settings: the job spec's checks and words (runtime/agent/spec/job.py).
    ({"workers": 0}, "workers", GIVEN, "must be 1 or more", "use 1 or more nodes"),
    ({"workers": 2.0}, "workers", GIVEN, "whole number", "use 1 or more nodes"),
    ({"workers": True}, "workers", GIVEN, "whole number", "use 1 or more nodes"),
    ({"gpus": 1.5}, "gpus", GIVEN, "whole number", "use a whole number >= 0"),
    ({"gpus": -1}, "gpus", GIVEN, "must be 0 or more", "use a whole number >= 0"),
    ({"num_proc": "auto"}, "num_proc", GIVEN, "one process per GPU but gpus=0",
     "set gpus >= 1 or give num_proc as an int"),
    ({"num_proc": 0}, "num_proc", GIVEN, "must be 1 or more", "use 1 or more processes per node"),
    ({"num_proc": "four"}, "num_proc", GIVEN, "whole number", "use 1 or more processes per node"),
    ({"cpus": 0}, "cpus", GIVEN, "number > 0", "pass a positive int or float"),
    ({"memory": "16GB"}, "memory", GIVEN, "not a Kubernetes quantity", 'write it like "512Mi" or "8Gi"'),
    ({"shm_size": 1024}, "shm_size", GIVEN, "not a Kubernetes quantity", 'write it like "512Mi" or "8Gi"'),
    ({"distribution": "horovod"}, "distribution", GIVEN, "must be one of spmd,",
     "use one of spmd, pytorch, jax, tensorflow, ray, monarch"),
    ({"mode": "interactive"}, "mode", GIVEN, "must be one of batch, service", "use one of batch, service"),
    ({"backend": "deployment"}, "backend", GIVEN, "must be one of", "use one of indexed-job, pytorchjob, statefulset"),
    ({"mode": "service", "backend": "indexed-job"}, "backend", GIVEN, "service mode needs a long-running backend",
     SERVICE_FIX),
    ({"mode": "service", "backend": "pytorchjob"}, "backend", GIVEN, "service mode needs a long-running backend",
     SERVICE_FIX),
    ({"backend": "statefulset"}, "backend", GIVEN, "batch job would never finish",
     'use "indexed-job" or "pytorchjob", or mode="service"'),
    ({"monitor_members": "yes"}, "monitor_members", GIVEN, "must be true or false", "use true or false"),
    ({"max_restarts": -1}, "max_restarts", GIVEN, "must be 0 or more", "use 0 or more"),
    ({"quorum_timeout": 0}, "quorum_timeout", GIVEN, "must be a positive number of seconds", "use seconds > 0"),
    ({"quorum_workers": 3}, "quorum_workers", GIVEN, "must be from 1 to workers (2)",
     "use a quorum from 1 to the number of nodes (2)"),
    ({"quorum_workers": 0}, "quorum_workers", GIVEN, "must be 1 or more", "use 1 or more nodes"),
    ({"min_workers": 1}, "min_workers", GIVEN, "elastic bounds come in pairs",
     "set both min_workers and max_workers, or neither"),
    ({"max_workers": 4}, "max_workers", GIVEN, "elastic bounds come in pairs",
     "set both min_workers and max_workers, or neither"),
    ({"min_workers": 3, "max_workers": 2}, "min_workers", GIVEN, "must be from 1 to workers (2)",
     "use min_workers <= workers <= max_workers"),
    ({"min_workers": 3, "max_workers": 4}, "min_workers", GIVEN, "must be from 1 to workers (2)",
     "use min_workers <= workers <= max_workers"),
    ({"min_workers": 1, "max_workers": 1}, "max_workers", GIVEN, "must be at least workers (2)",
     "use min_workers <= workers <= max_workers"),
    ({"min_workers": 0, "max_workers": 4}, "min_workers", GIVEN, "must be 1 or more", "use 1 or more nodes"),
    ({"min_workers": 1, "max_workers": 4}, "max_workers", GIVEN, "an Indexed Job has exactly workers=2 pods",
     'set max_workers=2, or use backend="pytorchjob"'),
    ({"active_deadline_seconds": 0}, "active_deadline_seconds", GIVEN, "must be 1 or more", "use a whole number >= 1"),
    # Issue 12: combinations the runtime cannot honour, refused at preview.
    ({"workers": 3, "quorum_workers": 2}, "quorum_workers", GIVEN,
     "a fixed-size job forms its world with the first 2 nodes and refuses the other 1",
     "unset quorum_workers (wait for all 3), or make the job elastic with min_workers <= 2 and max_workers >= 3"),
    ({"mode": "service", "workers": 4, "quorum_workers": 1}, "quorum_workers", GIVEN, "a fixed-size job forms",
     "or make the job elastic"),
    ({"backend": "pytorchjob", "workers": 4, "min_workers": 3, "max_workers": 4, "quorum_workers": 2},
     "quorum_workers", GIVEN, "the world would form with fewer nodes than min_workers (3)",
     "use a quorum of at least 3, or lower min_workers"),
    ({"active_deadline_seconds": 300}, "active_deadline_seconds", GIVEN,
     "Kubernetes would stop the job before its quorum_timeout=300 s runs out", "use more than 300 seconds"),
    ({"active_deadline_seconds": 60, "quorum_timeout": 90.5}, "active_deadline_seconds", GIVEN,
     "quorum_timeout=90.5 s", "use more than 90.5 seconds, or lower quorum_timeout"),
    ({"mode": "service", "active_deadline_seconds": 3600}, "active_deadline_seconds", GIVEN,
     "a service job's StatefulSet has no deadline: it runs until the stack removes it", "unset it in service mode"),
    ({"grace_period": -1}, "grace_period", GIVEN, "must be 0 or more seconds", "use 0 or more seconds"),
    ({"grace_period": "30s"}, "grace_period", GIVEN, "must be a number of seconds", "use 0 or more seconds"),
    ({"backoff_limit": 2}, "backoff_limit", GIVEN, "a fixed-size job fails on its first pod failure",
     "unset backoff_limit, or make the job elastic"),
    ({"backoff_limit": -1, "min_workers": 1, "max_workers": 2}, "backoff_limit", GIVEN, "must be 0 or more",
     "use a whole number >= 0"),
    ({"mode": "service", "backoff_limit": 2, "min_workers": 1, "max_workers": 3}, "backoff_limit", GIVEN,
     "a service job's StatefulSet always replaces its pods", "unset backoff_limit"),
    # Issue 13: Kueue keeps a job at the pod count it admitted.
    ({"mode": "service", "gang_scheduler": "kueue", "queue": "q", "min_workers": 1, "max_workers": 4}, "max_workers",
     GIVEN, "the job could never grow past workers=2: Kueue's StatefulSet webhook keeps replicas at 2",
     "set max_workers=2 (the job may still shrink to min_workers), or use another gang_scheduler"),
    ({"backend": "pytorchjob", "gang_scheduler": "kueue", "queue": "q", "min_workers": 1, "max_workers": 3},
     "max_workers", GIVEN, "a resized PyTorchJob no longer matches its admitted Workload", "set max_workers=2"),
    ({"ttl_seconds_after_finished": -5}, "ttl_seconds_after_finished", GIVEN, "must be 0 or more",
     "use a whole number >= 0"),
    ({"mode": "service", "ttl_seconds_after_finished": 60}, "ttl_seconds_after_finished", GIVEN, "batch jobs only",
     "unset it in service mode"),
    ({"gang_scheduler": "yunikorn"}, "gang_scheduler", GIVEN, "must be one of",
     "use one of none, volcano, scheduler-plugins, kueue"),
    ({"gang_scheduler": "kueue"}, "queue", None, "Kueue needs exactly one of queue",
     "set queue to a LocalQueue in the namespace, or cluster_queue to a ClusterQueue"),
    ({"gang_scheduler": "kueue", "queue": "q", "cluster_queue": "cq"}, "queue", GIVEN, "exactly one of queue",
     "set queue to a LocalQueue in the namespace, or cluster_queue to a ClusterQueue"),
    ({"cluster_queue": "cq"}, "cluster_queue", GIVEN, "is a Kueue setting",
     'set gang_scheduler="kueue" or unset cluster_queue'),
    ({"queue": "q"}, "queue", GIVEN, "gang_scheduler='none' has no queues",
     'unset queue, or use gang_scheduler="volcano" or "kueue"'),
    ({"gang_scheduler": "scheduler-plugins", "queue": "q"}, "queue", GIVEN, "has no queues",
     'unset queue, or use gang_scheduler="volcano" or "kueue"'),
    ({"gang_scheduler": "volcano", "queue": "Team_A"}, "queue", GIVEN, "not a valid name", SUBDOMAIN_FIX),
    ({"scheduler_name": "My Scheduler"}, "scheduler_name", GIVEN, "not a valid name", SUBDOMAIN_FIX),
    ({"namespace": "Team-A"}, "namespace", GIVEN, "not a valid name",
     "use lower-case letters, digits and '-', starting and ending with a letter or digit"),
    ({"namespace": "a" * 64}, "namespace", GIVEN, "is 64 characters long", "shorten it to 63"),
    ({"env": {"RANK": "3"}}, "env['RANK']", "3", "is set by trainplane",
     "remove it; use the matching DistributedJobArgs field instead"),
    ({"env": {"TRAINPLANE_TOKEN": "x"}}, "env['TRAINPLANE_TOKEN']", "x", "is set by trainplane",
     "remove it; use the matching DistributedJobArgs field instead"),
    ({"env": {"TRAINPLANE_GRACE_PERIOD": "60"}}, "env['TRAINPLANE_GRACE_PERIOD']", "60", "is set by trainplane",
     "remove it; set the DistributedJobArgs field grace_period instead"),
    ({"env": {"MASTER_PORT": "29400"}}, "env['MASTER_PORT']", "29400", "is set by trainplane",
     "remove it; set the DistributedJobArgs field master_port instead"),
    ({"env": {"PYTHONPATH": "/src"}}, "env['PYTHONPATH']", "/src", "is set by trainplane",
     "remove it; list the directories to import from in pythonpath"),
    ({"env": {"1BAD": "x"}}, "env['1BAD']", "1BAD", "not an environment variable name",
     "use letters, digits, '_', '-' or '.', not starting with a digit"),
    ({"env": {"NCCL_DEBUG": 1}}, "env['NCCL_DEBUG']", 1, "values are strings", "quote it"),
    ({"env": ["NCCL_DEBUG=INFO"]}, "env", GIVEN, "mapping of names to values", "pass a dict"),
    ({"labels": {"team": "ml research"}}, "labels['team']", "ml research", "not a label value", LABEL_FIX),
    ({"labels": {"Example.com/team": "ml"}}, "labels['Example.com/team']", "Example.com/team", "prefix before '/'",
     'use a prefix such as "example.com/"'),
    ({"labels": {"-team": "ml"}}, "labels['-team']", "-team", "not a label name", LABEL_FIX),
    ({"labels": {"trainplane.dev/job": "other"}}, "labels['trainplane.dev/job']", "other", "is set by trainplane",
     "remove it"),
    ({"node_selector": {"gpu": None}}, "node_selector['gpu']", None, "not a label value", LABEL_FIX),
    ({"tolerations": [{"key": "a", "effects": "NoSchedule"}]}, "tolerations[0]", {"key": "a", "effects": "NoSchedule"},
     "not a Kubernetes Toleration", "use a dict with keys from"),
    ({"tolerations": {"key": "a"}}, "tolerations", GIVEN, "must be a list of dicts", "pass a list (or tuple)"),
    ({"service_account": "Trainer"}, "service_account", GIVEN, "not a valid name", SUBDOMAIN_FIX),
    ({"working_dir": "src"}, "working_dir", GIVEN, "absolute path", 'start it with "/"'),
    ({"log_dir": "logs"}, "log_dir", GIVEN, "absolute path", 'start it with "/"'),
    ({"log_dir": ""}, "log_dir", GIVEN, "must be non-empty text", "name a directory"),
    ({"pythonpath": "/app/examples"}, "pythonpath", GIVEN, "must be a list of directories",
     'pass a list such as ["/app/examples"]'),
    ({"pythonpath": ["/app", "examples"]}, "pythonpath[1]", "examples", "absolute path", 'start it with "/"'),
    ({"pythonpath": ["/app:/lib"]}, "pythonpath[0]", "/app:/lib", "contains ':'",
     "give each directory as its own list item"),
    ({"image_pull_policy": "always"}, "image_pull_policy", GIVEN, "must be one of",
     "use one of Always, IfNotPresent, Never"),
    ({"agent_port": 70000}, "agent_port", GIVEN, "must be from 1 to 65535", "use a TCP port from 1 to 65535"),
    ({"master_port": 0}, "master_port", GIVEN, "0 picks a free port when a job starts on one machine, and every node "
     "must know node 0's port in advance", "use a TCP port from 1 to 65535"),
    ({"master_port": 70000}, "master_port", GIVEN, "must be from 1 to 65535", "use a TCP port from 1 to 65535"),
    ({"master_port": 32300}, "master_port", GIVEN, "equals agent_port", "give them different ports"),
    ({"master_port": 65500, "num_proc": 2}, "master_port", GIVEN,
     "the job uses 66 ports from it (rendezvous, JAX, TensorFlow), up to 65565, beyond the last TCP port",
     "use a master_port of at most 65470"),
    ({"agent_port": 29501}, "agent_port", GIVEN,
     "inside the ports the job counts up from master_port (29500..", "give agent_port a port below 29500 or above"),
    ({"allow_from": [{"podSelectors": {}}]}, "allow_from[0]", {"podSelectors": {}}, "not a NetworkPolicyPeer",
     "use a dict with keys from"),
    ({"allow_from": [{}]}, "allow_from[0]", {}, "not a NetworkPolicyPeer", "use a dict with keys from"),
    ({"cluster_domain": "Cluster.Local"}, "cluster_domain", GIVEN, "not a valid name", SUBDOMAIN_FIX),
    ({"distribution": "ray", "num_proc": 2}, "num_proc", GIVEN,
     "a ray job runs one driver process, on node 0, and ray's own workers on every node", "set num_proc to 1"),
    ({"distribution": "monarch", "num_proc": "auto", "gpus": 8}, "num_proc", GIVEN,
     "a monarch job runs one driver process, on node 0, and monarch's own workers on every node", "set num_proc to 1"),
    ({"distribution": "ray", "num_proc": 1, "min_workers": 1, "max_workers": 2}, "min_workers", GIVEN,
     "a ray job cannot be elastic (its head is node 0)", "unset min_workers and max_workers"),
    ({"distribution": "ray", "num_proc": 1, "agent_port": 29533}, "agent_port", GIVEN,
     "ray listens there (ray-client: master_port + 33)", "give agent_port another port"),
    ({"distribution": "monarch", "num_proc": 1, "master_port": 65510}, "master_port", GIVEN,
     "the job uses 65 ports from it (rendezvous, JAX, TensorFlow), up to 65574, beyond the last TCP port",
     "use a master_port of at most 65471"),
    ({"distribution": "monarch", "num_proc": 1, "daemon_args": ["--num-cpus=1"]}, "daemon_args", GIVEN,
     "applies to distribution ray only: the arguments go to `ray start` (got distribution monarch)",
     "unset daemon_args, or use distribution ray"),
    ({"distribution": "ray", "num_proc": 1, "daemon_args": "--num-cpus=1"}, "daemon_args", GIVEN,
     "must be a list of strings", "give the arguments as a list of strings"),
]


@pytest.mark.parametrize(("overrides", "field", "value", "problem", "fix"), INVALID)
def test_invalid_args_name_field_value_and_fix(
    overrides: dict[str, Any], field: str, value: Any, problem: str, fix: str
) -> None:
    with pytest.raises(InvalidJobArgs) as info:
        job_args(**overrides)
    assert_names_field_value_and_fix(info.value, field, overrides[field] if value is GIVEN else value, problem, fix)


@pytest.mark.parametrize(
    ("name", "overrides", "problem", "fix"),
    [
        ("Demo", {}, "not a valid name", "use lower-case letters, digits and '-', starting with a letter"),
        ("1demo", {}, "not a valid name", "starting with a letter"),
        ("demo_job", {}, "not a valid name", "lower-case letters, digits and '-'"),
        ("demo-", {}, "not a valid name", "ending with a letter or digit"),
        ("a" * 62, {}, f"the pod host name '{'a' * 62}-1' would be 64 characters; Kubernetes allows 63",
         "shorten name to at most 61 characters"),
        ("a" * 61, {"workers": 11}, f"the pod host name '{'a' * 61}-10' would be 64 characters",
         "shorten name to at most 60 characters"),
        ("a" * 70, {}, f"the pod host name '{'a' * 70}-1' would be 72 characters",
         "shorten name to at most 61 characters"),
        ("a" * 53, {"mode": "service"},
         f"the StatefulSet controller-revision-hash label '{'a' * 53}-<hash>' would be 64 characters",
         "shorten name to at most 52 characters"),
        ("a" * 55, {"backend": "pytorchjob"},
         f"the PyTorchJob pod and Service name '{'a' * 55}-worker-0' would be 64 characters",
         "shorten name to at most 54 characters"),
        ("a" * 55, {"backend": "pytorchjob", "workers": 11},  # Master + Workers 0..9
         f"the PyTorchJob pod and Service name '{'a' * 55}-worker-9' would be 64 characters",
         "shorten name to at most 54 characters"),
        ("a" * 54, {"backend": "pytorchjob", "workers": 2, "min_workers": 1, "max_workers": 11},
         f"the PyTorchJob pod and Service name '{'a' * 54}-worker-10' would be 64 characters",
         "shorten name to at most 53 characters"),  # elastic: Workers 0..max_workers-1
    ],
)
def test_job_name_must_be_dns1035_and_fit_derived_names(
    name: str, overrides: dict[str, Any], problem: str, fix: str
) -> None:
    with pytest.raises(InvalidJobArgs) as info:
        validate_job_name(name, job_args(**overrides))
    assert_names_field_value_and_fix(info.value, "name", name, problem, fix)


def test_longest_allowed_name_passes() -> None:
    args = job_args(workers=11)
    validate_job_name("a" * max_name_length(args), args)
    assert max_name_length(args) == 60
