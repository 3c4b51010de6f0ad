"""Stack config checks of the platform fields: each job's node group, EFA and claims against what its cluster
offers (node groups with EFA, StorageClasses per cluster kind), and a pod identity role given the EKS cluster."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from components.capabilities import ClusterCapabilities
from components.cluster import EksGpuClusterArgs
from components.errors import InvalidJobArgs
from components.job.fit import check_fits
from tests.components.componenttest import job_args, stack_file
from tests.components.stackconfigtest import EXISTING_JOB, assert_refused, job, parse

pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("home")]

AWS_JOBS = stack_file("aws-gpu")["trainplane:jobs"]
GROUPS = stack_file("aws-gpu")["trainplane:gpuNodeGroups"]
P5 = {"name": "p5", "instanceTypes": ["p5.48xlarge"], "minSize": 0, "maxSize": 2, "desiredSize": 0, "efa": True,
      "availabilityZone": "us-west-2a"}
RWX_CLAIM = {"metadata": {"name": "ckpt"}, "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "efs",
                                                    "resources": {"requests": {"storage": "10Gi"}}}}


def aws_job(index: int, **changes: Any) -> list[dict[str, Any]]:
    jobs = copy.deepcopy(AWS_JOBS)
    jobs[index].update(changes)
    return [{k: v for k, v in j.items() if v is not None} for j in jobs]


def test_the_aws_gpu_stack_offers_its_groups_and_classes_and_binds_its_role() -> None:
    config = parse("aws-gpu")

    caps = config.capabilities
    assert caps.node_groups is not None and caps.node_groups["a10g-efa"].efa and not caps.node_groups["a10g"].efa
    assert caps.storage_classes == {"gp3": ("ReadWriteOnce",),
                                    "efs": ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany")}
    assert caps.default_storage_class == "gp3"
    assert isinstance(config.cluster, EksGpuClusterArgs) and config.cluster.pod_identity
    assert config.jobs[0].args.eks_cluster_name == "trainplane-gpu"


REFUSED = [
    pytest.param({"jobs": aws_job(1, nodeGroup="a10g")}, "trainplane:jobs[1].efa", "1",
                 "node group 'a10g' has no EFA interfaces", id="EFA on a group without it"),
    pytest.param({"jobs": aws_job(1, nodeGroup=None)}, "trainplane:jobs[1].efa", "1",
                 "set node_group to an EFA group \\(a10g-efa\\)", id="EFA on no group"),
    pytest.param({"jobs": aws_job(1, nodeGroup="p5"), "gpuNodeGroups": [*GROUPS, P5]}, "trainplane:jobs[1].efa",
                 "1", "set efa to 32", id="fewer interfaces than a p5 has"),
    pytest.param({"jobs": aws_job(0, nodeGroup="h100")}, "trainplane:jobs[0].nodeGroup", "'h100'",
                 "no such GPU node group", id="an unknown group"),
    pytest.param({"jobs": aws_job(0), "eksStorage": ["ebs"]}, "trainplane:jobs[0].claims[0].spec.storageClassName",
                 "'efs'", "offers no such StorageClass", id="a class the cluster does not install"),
    pytest.param({"jobs": aws_job(0), "eksClusterName": None}, "trainplane:jobs[0].iamRoleArn",
                 "'arn:aws:iam::123456789012:role/trainplane-digits'", "set trainplane:eksClusterName",
                 id="pod identity without the cluster's name"),
]


@pytest.mark.parametrize(("overrides", "key", "value", "fix"), REFUSED)
def test_platform_fields_the_eks_cluster_cannot_give_are_refused(overrides, key, value, fix) -> None:
    assert_refused("aws-gpu", overrides, key, value, fix)


def test_kind_offers_node_local_storage_only() -> None:
    rwo = {**RWX_CLAIM, "spec": {**RWX_CLAIM["spec"], "accessModes": ["ReadWriteOnce"], "storageClassName": None}}
    rwo["spec"] = {k: v for k, v in rwo["spec"].items() if v is not None}

    assert parse("local", jobs=job(claims=[rwo])).jobs[0].args.claims[0]["metadata"]["name"] == "ckpt"
    assert_refused("local", {"jobs": job(claims=[RWX_CLAIM])}, "trainplane:jobs[0].claims[0].spec.storageClassName",
                   "'efs'", "offers no such StorageClass")
    shared = {**RWX_CLAIM, "spec": {**RWX_CLAIM["spec"], "storageClassName": "standard"}}
    assert_refused("local", {"jobs": job(claims=[shared], checkpointDir="/ckpt", checkpointClaim="ckpt")},
                   "trainplane:jobs[0].claims[0].spec.accessModes", "['ReadWriteMany']",
                   "supports \\['ReadWriteOnce'\\].*offers no ReadWriteMany class: make the shared claim outside")
    existing_claim = parse("local", jobs=job(checkpointDir="/ckpt", checkpointClaim="nfs-checkpoints")).jobs[0].args
    assert existing_claim.checkpoint_claim == "nfs-checkpoints" and not existing_claim.claims


def test_a_stack_job_may_retain_its_claims() -> None:
    jobs = [{**EXISTING_JOB, "claims": [RWX_CLAIM], "claimRetention": "Retain"}]

    assert parse("existing", jobs=jobs).jobs[0].args.claim_retention == "Retain"
    assert parse("existing", jobs=[{**EXISTING_JOB, "claims": [RWX_CLAIM]}]).jobs[0].args.claim_retention == "Delete"
    assert_refused("existing", {"jobs": [{**jobs[0], "claimRetention": "Keep"}]}, "trainplane:jobs[0].claimRetention",
                   "'Keep'", "Delete")


def test_an_existing_cluster_checks_claims_only_against_the_classes_it_lists() -> None:
    jobs = [{**EXISTING_JOB, "claims": [RWX_CLAIM]}]
    assert parse("existing", jobs=jobs).capabilities.storage_classes is None
    assert_refused("existing", {"jobs": jobs, "existingStorageClasses": {"nfs": ["ReadWriteMany"]}},
                   "trainplane:jobs[0].claims[0].spec.storageClassName", "'efs'", "offers no such StorageClass")


def test_a_program_of_its_own_gets_the_same_checks_from_its_capabilities() -> None:
    cluster = ClusterCapabilities(node_groups={}, storage_classes={"efs": ("ReadWriteMany",)})

    check_fits(job_args(claims=[RWX_CLAIM]), cluster)
    with pytest.raises(InvalidJobArgs) as caught:
        check_fits(job_args(efa=4, memory="8Gi"), cluster)
    assert caught.value.field == "efa"
