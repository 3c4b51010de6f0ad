"""DistributedJobArgs: every validation error names the field, the value and the fix; derived values."""

from __future__ import annotations

import re
from typing import Any

import pytest

from components import DistributedJobArgs
from components.errors import InvalidJobArgs
from components.job.args import max_name_length, validate_job_name
from tests.components.componenttest import job_args

INVALID = [
    # (overrides, field, message fragment)
    ({"image": ""}, "image", "non-empty image reference"),
    ({"image": "py thon"}, "image", "without spaces"),
    ({"script": None}, "script", "a batch job needs a script or a module to run"),
    ({"module": "pkg.train"}, "script", "exactly one of script and module"),
    ({"script": None, "module": "pkg-train"}, "module", "not a dotted module name"),
    ({"args": ["--epochs", 3]}, "args", "list of strings"),
    ({"args": "--epochs 3"}, "args", "list of strings"),
    ({"workers": 0}, "workers", "must be >= 1"),
    ({"workers": 2.0}, "workers", "whole number"),
    ({"workers": True}, "workers", "whole number"),
    ({"gpus": 1.5}, "gpus", "whole number"),
    ({"gpus": -1}, "gpus", "must be >= 0"),
    ({"num_proc": "auto"}, "num_proc", "one process per GPU but gpus=0"),
    ({"num_proc": 0}, "num_proc", "must be >= 1"),
    ({"num_proc": "four"}, "num_proc", "whole number"),
    ({"cpus": 0}, "cpus", "number > 0"),
    ({"memory": "16GB"}, "memory", "not a Kubernetes quantity"),
    ({"shm_size": 1024}, "shm_size", "not a Kubernetes quantity"),
    ({"distribution": "horovod"}, "distribution", "use one of spmd, pytorch, jax, tensorflow, ray, monarch"),
    ({"mode": "interactive"}, "mode", "use one of batch, service"),
    ({"backend": "deployment"}, "backend", "use one of indexed-job, pytorchjob, statefulset"),
    ({"mode": "service", "backend": "indexed-job"}, "backend", "service mode needs a long-running backend"),
    ({"mode": "service", "backend": "pytorchjob"}, "backend", "service mode needs a long-running backend"),
    ({"backend": "statefulset"}, "backend", "batch job would never finish"),
    ({"monitor_members": "yes"}, "monitor_members", "must be a bool"),
    ({"max_restarts": -1}, "max_restarts", "must be >= 0"),
    ({"quorum_timeout": 0}, "quorum_timeout", "number > 0"),
    ({"quorum_workers": 3}, "quorum_workers", "exceeds workers=2"),
    ({"quorum_workers": 0}, "quorum_workers", "must be >= 1"),
    ({"min_workers": 1}, "min_workers", "elastic bounds come in pairs"),
    ({"max_workers": 4}, "max_workers", "elastic bounds come in pairs"),
    ({"min_workers": 3, "max_workers": 2}, "min_workers", "exceeds max_workers=2"),
    ({"min_workers": 3, "max_workers": 4}, "workers", "outside min_workers..max_workers"),
    ({"min_workers": 0, "max_workers": 4}, "min_workers", "must be >= 1"),
    ({"active_deadline_seconds": 0}, "active_deadline_seconds", "must be >= 1"),
    ({"ttl_seconds_after_finished": -5}, "ttl_seconds_after_finished", "must be >= 0"),
    ({"mode": "service", "ttl_seconds_after_finished": 60}, "ttl_seconds_after_finished", "batch jobs only"),
    ({"gang_scheduler": "yunikorn"}, "gang_scheduler", "use one of none, volcano, scheduler-plugins, kueue"),
    ({"gang_scheduler": "kueue"}, "queue", "Kueue needs exactly one of queue"),
    ({"gang_scheduler": "kueue", "queue": "q", "cluster_queue": "cq"}, "queue", "exactly one of queue"),
    ({"cluster_queue": "cq"}, "cluster_queue", "is a Kueue setting"),
    ({"queue": "q"}, "queue", "gang_scheduler='none' has no queues"),
    ({"gang_scheduler": "scheduler-plugins", "queue": "q"}, "queue", "has no queues"),
    ({"gang_scheduler": "volcano", "queue": "Team_A"}, "queue", "not a valid name"),
    ({"scheduler_name": "My Scheduler"}, "scheduler_name", "not a valid name"),
    ({"namespace": "Team-A"}, "namespace", "not a valid name"),
    ({"namespace": "a" * 64}, "namespace", "shorten it to 63"),
    ({"env": {"RANK": "3"}}, "env['RANK']", "is set by trainplane"),
    ({"env": {"TRAINPLANE_TOKEN": "x"}}, "env['TRAINPLANE_TOKEN']", "is set by trainplane"),
    ({"env": {"PYTHONPATH": "/src"}}, "env['PYTHONPATH']", "list the directories to import from in pythonpath"),
    ({"env": {"1BAD": "x"}}, "env['1BAD']", "not an environment variable name"),
    ({"env": {"NCCL_DEBUG": 1}}, "env['NCCL_DEBUG']", "values are strings"),
    ({"env": ["NCCL_DEBUG=INFO"]}, "env", "mapping of names to values"),
    ({"labels": {"team": "ml research"}}, "labels['team']", "not a label value"),
    ({"labels": {"Example.com/team": "ml"}}, "labels['Example.com/team']", "prefix before '/'"),
    ({"labels": {"-team": "ml"}}, "labels['-team']", "not a label name"),
    ({"labels": {"trainplane.dev/job": "other"}}, "labels['trainplane.dev/job']", "is set by trainplane"),
    ({"node_selector": {"gpu": None}}, "node_selector['gpu']", "not a label value"),
    (
        {"tolerations": [{"key": "a", "effects": "NoSchedule"}]},
        "tolerations[0]",
        "not a Kubernetes Toleration",
    ),
    ({"tolerations": {"key": "a"}}, "tolerations", "must be a list of dicts"),
    ({"service_account": "Trainer"}, "service_account", "not a valid name"),
    ({"working_dir": "src"}, "working_dir", "absolute path"),
    ({"log_dir": "logs"}, "log_dir", "absolute path"),
    ({"pythonpath": "/app/examples"}, "pythonpath", "must be a list of directories"),
    ({"pythonpath": ["/app", "examples"]}, "pythonpath[1]", "absolute path"),
    ({"pythonpath": ["/app:/lib"]}, "pythonpath[0]", "give each directory as its own list item"),
    ({"image_pull_policy": "always"}, "image_pull_policy", "use one of Always, IfNotPresent, Never"),
    ({"agent_port": 70000}, "agent_port", "is not a TCP port"),
    ({"master_port": 0}, "master_port", "must be >= 1"),
    ({"master_port": 32300}, "master_port", "equals agent_port"),
    ({"allow_from": [{"podSelectors": {}}]}, "allow_from[0]", "not a NetworkPolicyPeer"),
    ({"allow_from": [{}]}, "allow_from[0]", "not a NetworkPolicyPeer"),
    ({"cluster_domain": "Cluster.Local"}, "cluster_domain", "not a valid name"),
    ({"distribution": "ray"}, "num_proc", "a ray job runs one driver process, on node 0, and ray's own workers"),
    ({"distribution": "monarch", "num_proc": "auto", "gpus": 8}, "num_proc", "set num_proc=1"),
    ({"distribution": "ray", "num_proc": 1, "min_workers": 1, "max_workers": 4}, "min_workers",
     "a ray job cannot be elastic: its head is node 0"),
    ({"distribution": "ray", "num_proc": 1, "agent_port": 29533}, "agent_port",
     "ray listens there (ray-client: master_port + 33); give agent_port another port"),
    ({"distribution": "monarch", "num_proc": 1, "master_port": 65510}, "master_port",
     "monarch listens on master_port + 32 (65542, monarch), beyond the last TCP port; use a master_port of at "
     "most 65503"),
    ({"distribution": "monarch", "num_proc": 1, "daemon_args": ["--num-cpus=1"]}, "daemon_args",
     "they go to `ray start`, and distribution is 'monarch'"),
    ({"distribution": "ray", "num_proc": 1, "daemon_args": "--num-cpus=1"}, "daemon_args", "must be a list of strings"),
]


@pytest.mark.parametrize(("overrides", "field", "fragment"), INVALID)
def test_invalid_args_name_field_value_and_fix(overrides: dict[str, Any], field: str, fragment: str) -> None:
    with pytest.raises(InvalidJobArgs, match=re.escape(fragment)) as info:
        job_args(**overrides)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}=")
    assert info.value.fix, "every error says how to fix it"


@pytest.mark.parametrize(
    ("name", "overrides", "fragment"),
    [
        ("Demo", {}, "not a valid name"),
        ("1demo", {}, "not a valid name"),
        ("demo_job", {}, "not a valid name"),
        ("demo-", {}, "not a valid name"),
        ("a" * 62, {}, "shorten it to 61"),  # "<name>-1" must stay a 63-char host name
        ("a" * 61, {"workers": 11}, "shorten it to 60"),  # "<name>-10"
        ("a" * 53, {"mode": "service"}, "shorten it to 52"),  # StatefulSet revision-hash label
        ("a" * 55, {"backend": "pytorchjob"}, "shorten it to 54"),  # "<name>-worker-1"
        (
            "a" * 54,
            {"backend": "pytorchjob", "workers": 2, "min_workers": 1, "max_workers": 11},
            "shorten it to 53",
        ),  # "<name>-worker-10", from max_workers
    ],
)
def test_job_name_must_be_dns1035_and_fit_derived_names(
    name: str, overrides: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(InvalidJobArgs, match=re.escape(fragment)) as info:
        validate_job_name(name, job_args(**overrides))
    assert info.value.field == "name"


def test_longest_allowed_name_passes() -> None:
    args = job_args(workers=11)
    validate_job_name("a" * max_name_length(args), args)
    assert max_name_length(args) == 60


@pytest.mark.parametrize(
    ("overrides", "backend"),
    [({}, "indexed-job"), ({"mode": "service"}, "statefulset"), ({"backend": "pytorchjob"}, "pytorchjob")],
)
def test_backend_defaults_follow_mode(overrides: dict[str, Any], backend: str) -> None:
    assert job_args(**overrides).workload_backend == backend


def test_derived_values() -> None:
    args = job_args(workers=4, gpus=8, num_proc="auto", args=["--epochs", "3"])
    assert (args.procs_per_node, args.quorum, args.elastic, args.max_nodes) == (8, 4, False, 4)
    assert args.entrypoint == ("train.py", "--epochs", "3")
    elastic = job_args(
        script=None, module="pkg.train", workers=3, quorum_workers=2, min_workers=2, max_workers=6
    )
    assert (elastic.quorum, elastic.elastic, elastic.max_nodes) == (2, True, 6)
    assert elastic.entrypoint == ("-m", "pkg.train")


def test_collections_are_frozen_copies() -> None:
    env = {"NCCL_DEBUG": "INFO"}
    args = job_args(env=env, args=["--x"])
    env["NCCL_DEBUG"] = "WARN"
    assert args.env["NCCL_DEBUG"] == "INFO"
    assert args.args == ("--x",)
    with pytest.raises(TypeError):
        args.env["NEW"] = "1"  # type: ignore[index]


@pytest.mark.parametrize("quantity", ["16Gi", "1.5G", ".5Gi", "512M", "1e9", "64000Ki"])
def test_memory_takes_any_non_negative_kubernetes_quantity(quantity: str) -> None:
    assert job_args(memory=quantity, shm_size=quantity).memory == quantity


@pytest.mark.parametrize("quantity", ["-1Gi", "+1Gi", "16 Gi", "16GiB"])
def test_memory_rejects_signed_or_malformed_quantities(quantity: str) -> None:
    with pytest.raises(InvalidJobArgs, match="not a Kubernetes quantity"):
        job_args(memory=quantity)


def test_args_are_importable_from_package_root() -> None:
    assert DistributedJobArgs(image="img", module="m").workload_backend == "indexed-job"


def test_a_service_job_runs_no_script() -> None:
    args = job_args(mode="service", script=None)
    assert args.entrypoint == ()
    assert job_args(script=None, module="pkg.train", args=["--lr", "0.1"]).entrypoint == ("-m", "pkg.train", "--lr",
                                                                                          "0.1")


def test_ray_start_gets_the_pods_cpus_and_gpus_then_daemon_args() -> None:
    args = job_args(distribution="ray", num_proc=1, cpus=3.5, gpus=2, daemon_args=["--num-cpus=2"])
    assert args.ray_start_args == ("--num-cpus=3", "--num-gpus=2", "--num-cpus=2")
    assert job_args(distribution="ray", num_proc=1, cpus=0.5).ray_start_args == ("--num-cpus=1",)
    assert job_args(distribution="ray", num_proc=1, mode="service", script=None).ray_start_args == ()
