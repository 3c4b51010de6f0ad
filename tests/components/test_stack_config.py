"""Stack config parsing: the stack files in stacks/ parse into the cluster, add-ons and jobs they describe."""

from __future__ import annotations

import pytest

from components.addons.versions import VOLCANO_SCHEDULER
from components.cluster import EksGpuClusterArgs, ExistingClusterArgs, KindClusterArgs
from tests.components.stackconfigtest import parse

pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("home")]


def test_local_stack_is_kind_with_volcano_and_the_digits_batch_and_service_jobs():
    config = parse("local")

    assert config.cluster == KindClusterArgs(workers=2, load_images=("trainplane-examples:dev",))
    assert config.addons.volcano.queue == "trainplane"
    assert config.addons.device_plugin is None and config.addons.kueue is None
    assert [(j.name, j.args.mode, j.args.workers, j.args.num_proc, j.args.gang_scheduler) for j in config.jobs] == [
        ("digits", "batch", 2, 2, "volcano"),
        ("digits-service", "service", 2, 2, "none"),
    ]
    assert config.jobs[1].args.pythonpath == ("/app/examples",)


def test_aws_gpu_stack_is_eks_with_a_gpu_group_and_a_gpu_job():
    config = parse("aws-gpu")

    assert isinstance(config.cluster, EksGpuClusterArgs)
    assert config.cluster.gpu_node_groups[0].instance_types == ("g5.2xlarge",)
    assert config.addons.device_plugin is not None
    assert config.jobs[0].args.gpus == 1


def test_existing_stack_runs_a_pytorchjob_through_kueue():
    config = parse("existing")

    assert config.cluster == ExistingClusterArgs()
    assert config.addons.training_operator.gang_scheduler_name is None
    assert config.addons.kueue.has_local_queue("default", "trainplane")
    assert (config.jobs[0].args.workload_backend, config.jobs[0].args.gang_scheduler) == (
        "pytorchjob",
        "kueue",
    )


def test_training_operator_gang_flag_follows_volcano():
    config = parse("local", addons=["volcano", "training-operator"])

    assert config.addons.training_operator.gang_scheduler_name == VOLCANO_SCHEDULER
