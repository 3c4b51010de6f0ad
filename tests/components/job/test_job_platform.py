"""The platform fields of a job, rendered by the pure builders for every backend and validated against the
Kubernetes schema: volumes, claims, the checkpoint dir, secrets by reference, pull secrets, identity, EFA."""

from __future__ import annotations

from typing import Any

import pytest

from components.errors import InvalidJobArgs
from components.job.fabric import NODE_GROUP_LABEL
from components.job.platform import SAFE_TO_EVICT
from components.job.volumes import CHECKPOINT_DIR_ENV
from tests.components.componenttest import job_args
from tests.components.job.jobrender import BACKENDS, env_of, kind_of, render, templates
from tests.components.schemacheck import validate_manifest

pytestmark = pytest.mark.unit

CLAIM = {"metadata": {"name": "ckpt"}, "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "efs",
                                                "resources": {"requests": {"storage": "100Gi"}}}}
STORAGE: dict[str, Any] = {
    "volumes": [
        {"name": "data", "persistentVolumeClaim": {"claimName": "imagenet", "readOnly": True}},
        {"name": "scratch", "emptyDir": {"sizeLimit": "200Gi"}},
        {"name": "config", "configMap": {"name": "train-config"}},
        {"name": "creds", "secret": {"secretName": "creds"}},
        {"name": "s3", "csi": {"driver": "s3.csi.aws.com", "volumeAttributes": {"bucketName": "corpus"}}},
    ],
    "volume_mounts": [
        {"name": "data", "mountPath": "/data", "readOnly": True},
        {"name": "scratch", "mountPath": "/scratch"},
        {"name": "config", "mountPath": "/etc/train"},
        {"name": "creds", "mountPath": "/var/run/creds", "readOnly": True},
        {"name": "s3", "mountPath": "/corpus"},
    ],
    "claims": [CLAIM],
    "checkpoint_dir": "/checkpoints",
    "checkpoint_claim": "ckpt",
}
ACCESS: dict[str, Any] = {
    "secret_env": {"HF_TOKEN": {"name": "hf", "key": "token"}},
    "secret_values": {"WANDB_API_KEY": "wandb-key-value"},
    "image_pull_secrets": ["registry"],
    "iam_role_arn": "arn:aws:iam::123456789012:role/trainer",
    "eks_cluster_name": "gpu",
}
EFA = {"efa": 32, "gpus": 8, "memory": "1000Gi", "node_group": "p5"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_mounts_the_volumes_claims_and_checkpoint_dir_and_validates(backend: str) -> None:
    job = render(**BACKENDS[backend][0], **STORAGE, **ACCESS, **EFA)

    for manifest in job.manifests:
        validate_manifest(manifest.body)
    for template in templates(job):
        spec = template["spec"]
        volumes = {v["name"]: v for v in spec["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in spec["containers"][0]["volumeMounts"]}
        assert {"data", "scratch", "config", "creds", "s3", "trainplane-runtime", "dshm"} <= set(volumes)
        assert volumes["trainplane-checkpoints"] == {"name": "trainplane-checkpoints",
                                                     "persistentVolumeClaim": {"claimName": "ckpt"}}
        assert mounts["/checkpoints"] == "trainplane-checkpoints" and mounts["/corpus"] == "s3"
        assert env_of(template)[CHECKPOINT_DIR_ENV] == "/checkpoints"
        assert template["metadata"]["annotations"][SAFE_TO_EVICT] == "false"
    claim = kind_of(job, "PersistentVolumeClaim")
    assert claim["metadata"]["name"] == "ckpt" and claim["spec"] == CLAIM["spec"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_secrets_reach_the_pods_by_reference_only(backend: str) -> None:
    job = render(**BACKENDS[backend][0], **ACCESS)

    for template in templates(job):
        env = env_of(template)
        assert env["HF_TOKEN"] == {"secretKeyRef": {"name": "hf", "key": "token"}}
        assert env["WANDB_API_KEY"] == {"secretKeyRef": {"name": "demo-env", "key": "WANDB_API_KEY"}}
        assert "wandb-key-value" not in repr(template)
        assert template["spec"]["imagePullSecrets"] == [{"name": "registry"}]
        assert template["spec"]["serviceAccountName"] == "demo"
    account = kind_of(job, "ServiceAccount")
    assert account["metadata"]["name"] == "demo" and "annotations" not in account["metadata"]
    secrets = {m.role: m.body for m in job.manifests if m.body["kind"] == "Secret"}
    assert set(secrets) == {"token", "env"}


def test_irsa_annotates_the_service_account_with_the_role() -> None:
    job = render(**{**ACCESS, "iam_binding": "irsa", "eks_cluster_name": None})

    account = kind_of(job, "ServiceAccount")
    assert account["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": ACCESS["iam_role_arn"]}
    validate_manifest(account)


@pytest.mark.parametrize("backend", BACKENDS)
def test_efa_pods_request_the_interfaces_huge_pages_and_the_libfabric_provider(backend: str) -> None:
    job = render(**BACKENDS[backend][0], **EFA)

    for template in templates(job):
        resources = template["spec"]["containers"][0]["resources"]
        for part in ("requests", "limits"):
            assert resources[part]["vpc.amazonaws.com/efa"] == "32"
            assert resources[part]["hugepages-2Mi"] == "5120Mi"
        assert env_of(template)["FI_PROVIDER"] == "efa"
        assert "FI_EFA_USE_DEVICE_RDMA" not in env_of(template), "libfabric >= 1.18 picks it; set, g5 aborts"
        assert template["spec"]["nodeSelector"][NODE_GROUP_LABEL] == "p5"


def test_a_job_without_platform_fields_renders_none_of_their_objects() -> None:
    job = render()

    kinds = {m.body["kind"] for m in job.manifests}
    assert not kinds & {"PersistentVolumeClaim", "ServiceAccount"}
    (template,) = templates(job)
    assert "imagePullSecrets" not in template["spec"] and CHECKPOINT_DIR_ENV not in env_of(template)


BAD: list[tuple[dict[str, Any], str]] = [
    ({"volumes": [{"name": "dshm", "emptyDir": {}}]}, "volumes[0].name"),
    ({"volumes": [{"name": "x", "emptyDir": {}, "hostPath": {"path": "/"}}]}, "volumes[0]"),
    ({"volumes": [{"name": "x", "emptyDirr": {}}]}, "volumes[0]"),
    ({"volume_mounts": [{"name": "x", "mountPath": "/x"}]}, "volume_mounts[0].name"),
    ({"volumes": [{"name": "x", "emptyDir": {}}], "volume_mounts": [{"name": "x", "mountPath": "/dev/shm"}]},
     "volume_mounts[0].mountPath"),
    ({"volumes": [{"name": "x", "emptyDir": {}}], "volume_mounts": [{"name": "x", "mountPath": "/ck"}],
      "checkpoint_dir": "/ck", "checkpoint_claim": "c"}, "volume_mounts[0].mountPath"),
    ({"checkpoint_dir": "/ck"}, "checkpoint_dir"),
    ({"checkpoint_claim": "c"}, "checkpoint_claim"),
    ({"claims": [{**CLAIM, "spec": {**CLAIM["spec"], "accessModes": ["ReadWriteOnce"]}}], "checkpoint_dir": "/ck",
      "checkpoint_claim": "ckpt"}, "checkpoint_claim"),
    ({"claims": [{"metadata": {"name": "c"}, "spec": {"accessModes": ["ReadWriteOnce"]}}]},
     "claims[0].spec.resources.requests.storage"),
    ({"secret_env": {"RANK": {"name": "s", "key": "k"}}}, "secret_env['RANK']"),
    ({"secret_env": {"A": {"name": "s"}}}, "secret_env['A']"),
    ({"env": {"A": "1"}, "secret_values": {"A": "2"}}, "secret_values['A']"),
    ({"iam_role_arn": "role/trainer"}, "iam_role_arn"),
    ({"iam_role_arn": ACCESS["iam_role_arn"]}, "eks_cluster_name"),
    ({"iam_role_arn": ACCESS["iam_role_arn"], "eks_cluster_name": "gpu", "service_account": "sa"},
     "service_account"),
    ({"iam_binding": "keys"}, "iam_binding"),
    ({"claim_retention": "retain"}, "claim_retention"),
    ({"efa": -1}, "efa"),
    ({"node_group": "GPU_1"}, "node_group"),
    ({"efa": 4}, "memory"),
    ({"image_pull_secrets": ["Bad_Name"]}, "image_pull_secrets[0]"),
]


@pytest.mark.parametrize(("overrides", "field"), BAD, ids=[f for _, f in BAD])
def test_bad_platform_fields_name_the_field(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidJobArgs) as caught:
        job_args(**overrides)
    assert caught.value.field == field
