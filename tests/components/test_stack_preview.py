"""``pulumi preview`` of the aws-gpu stack under the mocks: every object it registers, each checked against its
provider's schema. Kubernetes objects are validated whole (kubernetes-validate, strict; custom resources against
their published CRDs); every other resource's inputs must be properties of its Pulumi SDK's args type (the SDKs
are generated from their providers' schemas: pulumi_aws, pulumi_eks, pulumi_kubernetes, pulumi_random)."""

from __future__ import annotations

import importlib
import runpy
from collections.abc import Mapping
from typing import Any

import pulumi
import pytest
from pulumi._types import input_type_py_to_pulumi_names

from tests.components.componenttest import REPO_ROOT, Deployment, Registration, deploy, stack_config, unsecret
from tests.components.schemacheck import has_published_crd, validate_manifest

pytestmark = pytest.mark.unit

SDKS = {"aws": "pulumi_aws", "eks": "pulumi_eks", "kubernetes": "pulumi_kubernetes", "random": "pulumi_random"}
NOT_OBJECTS = {"helm.sh/v3", "kustomize/v2", "yaml/v2", "yaml"}
"""Kubernetes provider types that install objects rather than being one (their inputs are checked as args)."""
ENGINE_INPUTS = {"__defaults"}
UNPUBLISHED = {"AdmissionCheck", "ProvisioningRequestConfig"}
"""Kueue kinds whose CRDs ``shared/schemas`` does not carry; ``test_atomic_scale_up`` checks their fields."""


def preview(stack: str) -> Deployment:
    def program() -> Mapping[str, Any]:
        root = pulumi.runtime.get_root_resource()
        root.outputs.clear()
        runpy.run_path(str(REPO_ROOT / "__main__.py"), run_name="__main__")
        return dict(root.outputs)

    return deploy(program, stack_config(stack), preview=True)


@pytest.fixture(scope="module")
def aws_gpu() -> Deployment:
    return preview("aws-gpu")


def args_class(type_token: str) -> type:
    """The SDK args class of a resource type token: ``aws:eks/addon:Addon`` -> ``pulumi_aws.eks.AddonArgs``,
    ``pulumi:providers:kubernetes`` -> ``pulumi_kubernetes.ProviderArgs``."""
    if type_token.startswith("pulumi:providers:"):
        return importlib.import_module(SDKS[type_token.rsplit(":", 1)[1]]).ProviderArgs
    package, module, name = type_token.split(":")
    path = module.split("/")[0] if package != "kubernetes" else module.replace(".k8s.io", "").replace(".sh", "")
    path = path.replace("/", ".").replace("-", "_")
    base = importlib.import_module(SDKS[package])
    target = base if path in ("index", "") else importlib.import_module(f"{SDKS[package]}.{path}")
    return getattr(target, f"{name}Args")


def kubernetes_object(reg: Registration) -> dict[str, Any] | None:
    """The Kubernetes object a registration is, or None for an installer (Helm release, kustomize, yaml)."""
    _, group_version, kind = reg.type.split(":")
    if group_version in NOT_OBJECTS or reg.type.startswith("pulumi:providers:"):
        return None
    inputs = unsecret(reg.inputs)
    api_version = group_version.removeprefix("core/")
    return {"apiVersion": inputs.get("apiVersion", api_version), "kind": inputs.get("kind", kind),
            **{k: v for k, v in inputs.items() if k not in ENGINE_INPUTS}}


def check_against_schema(reg: Registration) -> str:
    """Validate one registration against its provider's schema; returns how it was checked."""
    if reg.type.startswith("kubernetes:"):
        body = kubernetes_object(reg)
        if body is not None and body["kind"] in UNPUBLISHED and not has_published_crd(body):
            return "no published crd"
        if body is not None:
            validate_manifest(body)
            return "kubernetes schema"
    allowed = set(input_type_py_to_pulumi_names(args_class(reg.type)).values())
    unknown = set(reg.inputs) - allowed - ENGINE_INPUTS
    assert not unknown, f"{reg.type} {reg.name}: inputs {sorted(unknown)} are not in its args type"
    return "sdk args"


def test_preview_lists_every_object_and_each_matches_its_providers_schema(aws_gpu: Deployment) -> None:
    checked: dict[str, str] = {}
    for reg in aws_gpu.registrations.values():
        if reg.type.startswith("trainplane:"):
            continue
        checked[f"{reg.type} {reg.name}"] = check_against_schema(reg)
    print("\n".join(f"{how:17} {what}" for what, how in sorted(checked.items())))
    kinds = {what.split(" ")[0] for what in checked}
    assert {
        "kubernetes:core/v1:PersistentVolumeClaim", "kubernetes:core/v1:ServiceAccount",
        "kubernetes:storage.k8s.io/v1:StorageClass", "aws:eks/podIdentityAssociation:PodIdentityAssociation",
        "aws:eks/addon:Addon", "aws:efs/fileSystem:FileSystem", "aws:efs/mountTarget:MountTarget",
        "kubernetes:helm.sh/v3:Release", "eks:index:ManagedNodeGroup", "kubernetes:batch/v1:Job",
    } <= kinds
    assert list(checked.values()).count("kubernetes schema") >= 15


def test_the_stack_wires_storage_identity_efa_and_autoscaling_into_its_jobs(aws_gpu: Deployment) -> None:
    releases = {r.inputs["chart"]: r.inputs for r in aws_gpu.of_type("kubernetes:helm.sh/v3:Release")}
    charts = set(releases)
    assert releases["nvidia-device-plugin"]["values"]["mofedEnabled"] is False
    assert {"cluster-autoscaler", "aws-efa-k8s-device-plugin", "nvidia-device-plugin", "volcano"} <= charts
    claim = aws_gpu.named("digits-gpu-claim-digits-checkpoints")
    assert claim.inputs["spec"]["storageClassName"] == "efs"
    association = aws_gpu.named("digits-gpu-pod-identity")
    assert (association.inputs["clusterName"], association.inputs["serviceAccount"]) == ("trainplane-gpu", "digits-gpu")
    agent = next(r for r in aws_gpu.of_type("aws:eks/addon:Addon") if r.inputs["addonName"] == "eks-pod-identity-agent")
    assert agent.inputs["clusterName"] == "trainplane-gpu"
    pods = {j.name: j.inputs["spec"]["template"]["spec"] for j in aws_gpu.of_type("kubernetes:batch/v1:Job")}
    efa = pods["digits-efa-indexed-job"]["containers"][0]["resources"]
    assert efa["limits"]["vpc.amazonaws.com/efa"] == "1"
    assert pods["digits-efa-indexed-job"]["nodeSelector"]["trainplane.dev/node-group"] == "a10g-efa"
    gpu = pods["digits-gpu-indexed-job"]
    assert {"name": "registry-credentials"} in gpu["imagePullSecrets"]
    env = {e["name"]: e for e in gpu["containers"][0]["env"]}
    assert env["CHECKPOINT_DIR"]["value"] == "/checkpoints"
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "hf-token", "key": "token", "optional": True}
    groups = {g.name: g.inputs for g in aws_gpu.of_type("eks:index:ManagedNodeGroup")}
    assert groups["trainplane-cluster-gpu-a10g-efa"]["enableEfaSupport"] is True
    prefix = "k8s.io/cluster-autoscaler/node-template/resources/"
    templates = {t.inputs["tag"]["key"].removeprefix(prefix): t.inputs["tag"]["value"]
                 for t in aws_gpu.of_type("aws:autoscaling/tag:Tag")}
    assert templates == {"vpc.amazonaws.com/efa": "1", "hugepages-2Mi": "10256Mi"}


def test_the_stack_scales_its_kueue_gang_up_atomically(aws_gpu: Deployment) -> None:
    """The stack's ``kueue.atomicScaleUp``: every ClusterQueue runs the ProvisioningRequest check, the autoscaler
    handles ProvisioningRequests, and Kueue (whose manager sets its provisioning controller up only if the API is
    served when it starts) comes after the CRD."""
    releases = {r.inputs["chart"]: r.inputs for r in aws_gpu.of_type("kubernetes:helm.sh/v3:Release")}
    assert releases["cluster-autoscaler"]["values"]["extraArgs"]["enable-provisioning-requests"] is True
    check = aws_gpu.one("kubernetes:kueue.x-k8s.io/v1beta2:AdmissionCheck")
    queue = aws_gpu.one("kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue")
    assert queue.inputs["spec"]["admissionChecksStrategy"] == {
        "admissionChecks": [{"name": check.inputs["metadata"]["name"]}]}
    crd = aws_gpu.one("kubernetes:yaml/v2:ConfigFile")
    assert crd.urn in aws_gpu.one("trainplane:index:Kueue").dependencies
    job = aws_gpu.named("digits-efa-indexed-job")
    assert job.inputs["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "efa"
