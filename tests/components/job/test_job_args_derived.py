"""DistributedJobArgs that are valid: the values derived from them (backend, quorum, entrypoint, Ray's start
arguments), frozen copies of their collections, and the combinations accepted."""

from __future__ import annotations

from typing import Any

import pytest

from components import DistributedJobArgs
from components.errors import InvalidJobArgs
from tests.components.componenttest import job_args

pytestmark = pytest.mark.unit


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
        script=None, module="pkg.train", workers=3, quorum_workers=2, min_workers=2, max_workers=6,
        backend="pytorchjob",
    )
    assert (elastic.quorum, elastic.elastic, elastic.max_nodes) == (2, True, 6)
    assert elastic.entrypoint == ("-m", "pkg.train")
    assert not elastic.no_python


@pytest.mark.parametrize(
    "overrides",
    [
        {"backend": "pytorchjob", "min_workers": 1, "max_workers": 4},  # the operator scales Workers
        {"mode": "service", "min_workers": 1, "max_workers": 4},  # a StatefulSet scales
        {"min_workers": 1, "max_workers": 2},  # an Indexed Job only shrinks
    ],
)
def test_elastic_bounds_that_the_backend_can_reach_are_accepted(overrides: dict[str, Any]) -> None:
    args = job_args(**overrides)
    assert (args.elastic, args.min_workers, args.max_nodes) == (True, 1, overrides["max_workers"])


def test_a_command_is_the_whole_entrypoint_run_without_python() -> None:
    args = job_args(script=None, command=["bash", "-c", "echo $RANK"], args=["extra"])
    assert args.command == ("bash", "-c", "echo $RANK")
    assert args.no_python
    assert args.entrypoint == ("bash", "-c", "echo $RANK", "extra")


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


@pytest.mark.parametrize(
    "overrides",
    [
        {"workers": 3, "quorum_workers": 2, "min_workers": 2, "max_workers": 3},  # elastic: late nodes are admitted
        {"mode": "service", "gang_scheduler": "kueue", "queue": "q", "workers": 3, "min_workers": 1, "max_workers": 3},
        {"active_deadline_seconds": 301},
        {"grace_period": 0.5},
        {"backoff_limit": 0, "min_workers": 1, "max_workers": 2},
    ],
)
def test_combinations_the_cluster_and_the_runtime_can_honour_are_accepted(overrides: dict[str, Any]) -> None:
    args = job_args(**overrides)
    assert all(getattr(args, name) == value for name, value in overrides.items())
