"""One rule, one wording in the components: the cluster and add-on args, the stack config and a job's args
say a check's problem and fix alike (tests/test_check_words.py has the job's front ends')."""

from __future__ import annotations

import pytest

from components.addons.device_plugin import NvidiaDevicePluginArgs
from components.addons.kueue import KNOWN_FRAMEWORKS, ClusterQueueArgs, KueueArgs, LocalQueueArgs, ResourceFlavorArgs
from components.addons.trainer import TrainerV2Args
from components.addons.training_operator import OPERATOR_GANG_SCHEDULERS, TrainingOperatorArgs
from components.cluster.eks import EksGpuClusterArgs, GpuNodeGroupArgs
from components.cluster.existing import ExistingClusterArgs
from components.cluster.kind import KindClusterArgs
from components.errors import ArgumentError, InvalidJobArgs, StackConfigError
from components.stack.config import CLUSTER_KEYS, parse_addons, parse_cluster, parse_jobs
from runtime.agent import contract
from tests.checkwords import agent_error, parts
from tests.components.componenttest import job_args
from tests.components.stackconfigtest import LOCAL_JOB

pytestmark = pytest.mark.unit


def test_a_whole_number_is_worded_alike_by_the_job_args_and_the_cluster_args():
    with pytest.raises(InvalidJobArgs) as job:
        job_args(gpus=-1)
    with pytest.raises(ArgumentError) as cluster:
        KindClusterArgs(workers=-1)
    assert parts(job.value) == parts(cluster.value) == ("must be 0 or more", "use a whole number >= 0")


def test_a_choice_is_worded_alike_by_the_spec_the_job_args_and_the_add_on_args():
    with pytest.raises(InvalidJobArgs) as spec_rule:
        job_args(mode="interactive")
    with pytest.raises(InvalidJobArgs) as job_rule:
        job_args(image_pull_policy="always")
    assert parts(spec_rule.value) == ("must be one of batch, service", "use one of batch, service")
    policies = "Always, IfNotPresent, Never"
    assert parts(job_rule.value) == (f"must be one of {policies}", f"use one of {policies}")
    with pytest.raises(ArgumentError) as add_on_rule:
        TrainingOperatorArgs.for_gang_scheduler("kube-batch")
    listed = ", ".join(OPERATOR_GANG_SCHEDULERS)
    assert parts(add_on_rule.value) == (f"must be one of {listed}", f"use one of {listed}")


def test_a_flag_is_worded_alike_by_the_job_args_and_the_add_on_and_cluster_args():
    with pytest.raises(InvalidJobArgs) as job_rule:
        job_args(monitor_members="yes")
    with pytest.raises(ArgumentError) as add_on_rule:
        KueueArgs(block_admission="yes")  # type: ignore[arg-type]
    with pytest.raises(ArgumentError) as cluster_rule:
        ExistingClusterArgs(kubeconfig="k", gpu_nodes="yes")  # type: ignore[arg-type]
    assert parts(job_rule.value) == parts(add_on_rule.value) == parts(cluster_rule.value) == (
        "must be true or false", "use true or false")


def test_a_label_is_worded_alike_by_the_job_args_and_the_add_on_args():
    with pytest.raises(InvalidJobArgs) as job_rule:
        job_args(labels={"team": "-ml"})
    with pytest.raises(ArgumentError) as add_on_rule:
        ResourceFlavorArgs(name="gpu", node_labels={"team": "-ml"})
    fix = "use at most 63 letters, digits, '-', '_' or '.', alphanumeric at both ends"
    assert (job_rule.value.field, add_on_rule.value.field) == ("labels['team']", "node_labels['team']")
    assert parts(job_rule.value) == parts(add_on_rule.value) == ("not a label value", fix)


def test_a_repeated_name_is_worded_alike_by_the_add_on_and_cluster_args():
    with pytest.raises(ArgumentError) as add_on_rule:
        KueueArgs(flavors=[ResourceFlavorArgs(name="gpu"), ResourceFlavorArgs(name="gpu")])
    group = GpuNodeGroupArgs(name="gpu", instance_types=["g5.xlarge"])
    with pytest.raises(ArgumentError) as cluster_rule:
        EksGpuClusterArgs(availability_zones=["a", "b"], gpu_node_groups=[group, group])
    assert parts(add_on_rule.value) == parts(cluster_rule.value) == ("repeats gpu", "give each one its own name")
    with pytest.raises(ArgumentError) as listed_twice:
        TrainerV2Args(gang_schedulers=["volcano", "volcano"])
    assert parts(listed_twice.value) == ("repeats volcano", "list each one once")


def test_a_reference_to_something_undefined_is_worded_alike_by_the_add_on_and_cluster_args():
    with pytest.raises(ArgumentError) as add_on_rule:
        KueueArgs(flavors=[ResourceFlavorArgs(name="gpu")],
                  cluster_queues=[ClusterQueueArgs(name="main", quotas={"gpu": {"cpu": "1"}})],
                  local_queues=[LocalQueueArgs(name="q", namespace="ml", cluster_queue="other")])
    with pytest.raises(ArgumentError) as cluster_rule:
        ExistingClusterArgs(storage_classes={"efs": ["ReadWriteMany"]}, default_storage_class="gp3")
    assert parts(add_on_rule.value) == ("names no defined cluster queue", "use one of main")
    assert parts(cluster_rule.value) == ("names no defined storage class", "use one of efs")


def test_a_range_is_worded_alike_by_the_agent_and_the_cluster_args():
    with pytest.raises(ArgumentError) as cluster_rule:
        GpuNodeGroupArgs(name="gpu", instance_types=["g5.xlarge"], min_size=1, max_size=3, desired_size=4)
    assert parts(cluster_rule.value) == ("must be from 1 to 3", "use min_size (1) <= desired_size <= max_size (3)")
    assert agent_error({contract.WORKERS: "4", contract.NODE_RANK_SETTING: "4"}) == (
        f"{contract.NODE_RANK_SETTING}=4 is invalid: must be from 0 to 3; use a node rank from 0 to 3")


def test_an_optional_flag_is_worded_as_every_flag():
    with pytest.raises(ArgumentError) as optional_flag:
        NvidiaDevicePluginArgs(mofed_enabled="no")  # type: ignore[arg-type]
    assert parts(optional_flag.value) == ("must be true or false", "use true or false")
    assert NvidiaDevicePluginArgs(mofed_enabled=None).mofed_enabled is None


def test_a_kueue_framework_is_a_choice_worded_as_every_choice():
    with pytest.raises(ArgumentError) as info:
        KueueArgs(frameworks=["batch/job", "kubeflow.org/pytorchjobs"])
    listed = ", ".join(KNOWN_FRAMEWORKS)
    assert info.value.field == "frameworks[1]"
    assert parts(info.value) == (f"must be one of {listed}", f"use one of {listed}")


def test_a_stack_configs_choice_is_worded_as_every_choice():
    with pytest.raises(StackConfigError) as stack_rule:
        parse_cluster({"clusterKind": "gke"})
    listed = ", ".join(CLUSTER_KEYS)
    assert parts(stack_rule.value) == (f"must be one of {listed}", f"use one of {listed}")
    assert str(stack_rule.value) == f"trainplane:clusterKind = 'gke': must be one of {listed}; use one of {listed}"


def test_a_stack_config_error_carries_the_args_problem_and_fix_apart():
    with pytest.raises(ArgumentError) as cluster_rule:
        KindClusterArgs(workers=-1)
    with pytest.raises(StackConfigError) as stack_rule:
        parse_cluster({"clusterKind": "kind", "kindWorkers": -1})
    assert (stack_rule.value.key, stack_rule.value.value) == ("trainplane:kindWorkers", -1)
    assert parts(stack_rule.value) == parts(cluster_rule.value) == ("must be 0 or more", "use a whole number >= 0")
    assert str(stack_rule.value) == "trainplane:kindWorkers = -1: must be 0 or more; use a whole number >= 0"


def test_a_stack_configs_own_rules_say_the_problem_and_the_fix_apart():
    with pytest.raises(StackConfigError) as not_installed:
        parse_addons({"addons": [], "kueue": {}}, KindClusterArgs())
    assert parts(not_installed.value) == ("configures kueue, which trainplane:addons does not install",
                                          "add kueue to trainplane:addons or remove this key")
    with pytest.raises(StackConfigError) as node_groups:
        parse_cluster({"clusterKind": "kind", "gpuNodeGroups": [{"name": "gpu"}]})
    assert parts(node_groups.value) == ("only eks clusters have node groups (clusterKind 'kind')", "remove it")
    with pytest.raises(StackConfigError) as unnamed:
        parse_jobs([{k: v for k, v in LOCAL_JOB.items() if k != "name"}])
    assert (unnamed.value.key, *parts(unnamed.value)) == ("trainplane:jobs[0].name", "is required", "set it")


def test_a_repeated_job_name_in_the_stack_config_is_worded_as_every_repeated_name():
    with pytest.raises(StackConfigError) as stack_rule:
        parse_jobs([LOCAL_JOB, LOCAL_JOB])
    with pytest.raises(ArgumentError) as add_on_rule:
        KueueArgs(flavors=[ResourceFlavorArgs(name="gpu"), ResourceFlavorArgs(name="gpu")])
    name = LOCAL_JOB["name"]
    assert (stack_rule.value.key, stack_rule.value.value) == ("trainplane:jobs[1].name", name)
    assert parts(stack_rule.value) == (f"repeats {name}", parts(add_on_rule.value)[1])


def test_the_eks_clusters_cross_field_rules_say_the_problem_and_the_fix():
    with pytest.raises(ArgumentError) as zones:
        EksGpuClusterArgs(availability_zones=["us-west-2a"])
    assert str(zones.value) == ("availability_zones=('us-west-2a',): names fewer than 2 zones; list 2 or more zones "
                                "for the created VPC, or give vpc_id and subnets")
    with pytest.raises(ArgumentError) as subnets:
        EksGpuClusterArgs(availability_zones=["us-west-2a", "us-west-2b"], public_subnet_ids=["subnet-a"])
    assert str(subnets.value) == ("vpc_id=None: is unset, and subnet ids are given; set vpc_id too when giving "
                                  "subnet ids")
