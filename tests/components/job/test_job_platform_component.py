"""The platform fields under Pulumi mocks: a secret Output stays a secret from the program to the job's Secret
and never reaches the pod template; the claims, ServiceAccount and pod identity association are registered
before the workload that needs them; claims the job creates outlive ``pulumi destroy`` only with
``claim_retention="Retain"``."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest

from components.job import DistributedJob
from tests.components.componenttest import RecordingMonitor, deploy, is_secret, job_args

pytestmark = pytest.mark.unit

ROLE = "arn:aws:iam::123456789012:role/trainer"
CLAIM = {"metadata": {"name": "ckpt"}, "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "efs",
                                                "resources": {"requests": {"storage": "100Gi"}}}}


def secrets_in(value: Any) -> int:
    """How many secret-wrapped values ``value`` holds at any depth."""
    if is_secret(value):
        return 1
    if isinstance(value, dict):
        return sum(secrets_in(v) for v in value.values())
    if isinstance(value, list):
        return sum(secrets_in(v) for v in value)
    return 0


def run(**overrides: Any):
    def program() -> dict[str, Any]:
        key = pulumi.Output.secret("wandb-key-value")
        job = DistributedJob("demo", job_args(secret_values={"WANDB_API_KEY": key}, **overrides))
        return {"name": job.job_name}

    return deploy(program)


def test_a_secret_output_stays_secret_and_out_of_the_pod_template() -> None:
    result = run()

    env_secret = result.named("demo-env").inputs
    assert is_secret(env_secret["stringData"])
    assert "wandb-key-value" in repr(env_secret["stringData"])
    workload = result.named("demo-indexed-job").inputs
    assert "wandb-key-value" not in repr(workload) and secrets_in(workload) == 0
    env = {e["name"]: e for e in workload["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["WANDB_API_KEY"]["valueFrom"] == {"secretKeyRef": {"name": "demo-env", "key": "WANDB_API_KEY"}}
    assert result.named("demo-env").urn in result.named("demo-indexed-job").dependencies


def test_claims_service_account_and_pod_identity_come_before_the_workload() -> None:
    result = run(claims=[CLAIM], checkpoint_dir="/ckpt", checkpoint_claim="ckpt", iam_role_arn=ROLE,
                 eks_cluster_name="gpu")

    claim = result.named("demo-claim-ckpt")
    account = result.named("demo-service-account")
    association = result.named("demo-pod-identity")
    workload = result.named("demo-indexed-job")
    assert claim.type == "kubernetes:core/v1:PersistentVolumeClaim"
    assert claim.inputs["metadata"]["annotations"] == {"pulumi.com/waitFor": "jsonpath={.metadata.uid}"}
    assert account.type == "kubernetes:core/v1:ServiceAccount"
    assert account.inputs["automountServiceAccountToken"] is False
    assert association.type == "aws:eks/podIdentityAssociation:PodIdentityAssociation"
    assert association.inputs == {"clusterName": "gpu", "namespace": "default", "serviceAccount": "demo",
                                  "roleArn": ROLE}
    assert account.urn in association.dependencies
    assert {claim.urn, account.urn} <= set(workload.dependencies)
    assert workload.inputs["spec"]["template"]["spec"]["serviceAccountName"] == "demo"


SCRATCH = {"metadata": {"name": "scratch"}, "spec": {**CLAIM["spec"], "accessModes": ["ReadWriteOnce"]}}


def test_claims_go_with_the_job_unless_it_retains_them() -> None:
    deleted = run(claims=[CLAIM, SCRATCH], checkpoint_dir="/ckpt", checkpoint_claim="ckpt")
    kept = run(claims=[CLAIM, SCRATCH], checkpoint_dir="/ckpt", checkpoint_claim="ckpt", claim_retention="Retain")

    for name in ("demo-claim-ckpt", "demo-claim-scratch"):
        assert deleted.named(name).retain_on_delete is False
        assert kept.named(name).retain_on_delete is True
    assert not [r.name for r in kept.registrations.values()
                if r.retain_on_delete and r.type != "kubernetes:core/v1:PersistentVolumeClaim"]


def test_irsa_registers_no_pod_identity_association() -> None:
    result = run(iam_role_arn=ROLE, iam_binding="irsa")

    assert not result.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
    assert result.named("demo-service-account").inputs["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": ROLE}


def test_volumes_from_another_resources_outputs_reach_the_pods() -> None:
    def program() -> dict[str, Any]:
        claim = k8s.core.v1.PersistentVolumeClaim("data", metadata={"name": "imagenet"}, spec=CLAIM["spec"])
        volumes = [{"name": "data", "persistentVolumeClaim": {"claimName": claim.metadata.name, "readOnly": True}}]
        job = DistributedJob("demo", job_args(volumes=volumes, volume_mounts=[{"name": "data", "mountPath": "/data"}],
                                              backend="pytorchjob"))
        return {"name": job.job_name}

    result = deploy(program)

    for replica in result.named("demo-pytorchjob").inputs["spec"]["pytorchReplicaSpecs"].values():
        spec = replica["template"]["spec"]
        assert {"name": "data", "persistentVolumeClaim": {"claimName": "imagenet", "readOnly": True}} in spec["volumes"]
        assert {"name": "data", "mountPath": "/data"} in spec["containers"][0]["volumeMounts"]


def test_a_mount_of_a_volume_an_output_lacks_fails_naming_the_field() -> None:
    def program() -> dict[str, Any]:
        volumes = pulumi.Output.from_input([{"name": "data", "emptyDir": {}}])
        job = DistributedJob("demo", job_args(volumes=volumes, volume_mounts=[{"name": "other", "mountPath": "/x"}]))
        return {"name": job.job_name}

    monitor = RecordingMonitor()
    with pytest.raises(Exception, match=r"volume_mounts\[0\]\.name='other': no volume has this name"):
        deploy(program, monitor=monitor)
    assert [r.type for r in monitor.registrations.values()] == ["trainplane:index:DistributedJob"]


def test_a_secret_output_in_env_is_refused_before_anything_is_registered() -> None:
    def program() -> dict[str, Any]:
        job = DistributedJob("demo", job_args(env={"WANDB_API_KEY": pulumi.Output.secret("wandb-key-value")}))
        return {"name": job.job_name}

    monitor = RecordingMonitor()
    with pytest.raises(Exception, match=r"env='\[secret\]': holds a secret Output.*pass it in secret_values"):
        deploy(program, monitor=monitor)
    assert [r.type for r in monitor.registrations.values()] == ["trainplane:index:DistributedJob"]


def test_a_plain_output_in_env_still_reaches_the_pods() -> None:
    def program() -> dict[str, Any]:
        job = DistributedJob("demo", job_args(env={"DB_HOST": pulumi.Output.from_input("db.internal")}))
        return {"name": job.job_name}

    env = deploy(program).named("demo-indexed-job").inputs["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "DB_HOST", "value": "db.internal"} in env
