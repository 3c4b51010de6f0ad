"""Schema validation of rendered objects: custom resources against the published CRDs, built-in objects
with kubernetes-validate (strict), and kind's cluster config."""

from __future__ import annotations

import copy
import functools
from typing import Any

import jsonschema
import kubernetes_validate
import kubernetes_validate.utils
import yaml

from testbed.cluster import crds, versions

SCHEMAS = crds.schemas_dir()
"""The CRDs (PyTorchJob, PodGroups, Kueue queues, TrainJob, ClusterTrainingRuntime, JobSet) rendered objects
are validated against: the directory ``TRAINPLANE_CRD_SCHEMAS`` names, else ``shared/schemas`` beside the
repository (the published files, as CI checks it out), else the ones ``python -m testbed.cluster build``
generated with controller-gen."""


KUBERNETES_VERSION = versions.KUBERNETES.removeprefix("v").rsplit(".", 1)[0]
"""Kubernetes version the built-in objects are validated against (kubernetes-validate, strict): the test
cluster's release (``testbed/cluster/versions.py``), so the schemas agree with the API server the cluster
tests create the same objects on."""
CRD_FILES = {
    ("kubeflow.org", "PyTorchJob"): "kubeflow.org_pytorchjobs.yaml",
    ("kueue.x-k8s.io", "ResourceFlavor"): "kueue.x-k8s.io_resourceflavors.yaml",
    ("kueue.x-k8s.io", "ClusterQueue"): "kueue.x-k8s.io_clusterqueues.yaml",
    ("kueue.x-k8s.io", "LocalQueue"): "kueue.x-k8s.io_localqueues.yaml",
    ("scheduling.volcano.sh", "Queue"): "scheduling.volcano.sh_queues.yaml",
    ("scheduling.volcano.sh", "PodGroup"): "scheduling.volcano.sh_podgroups.yaml",
    ("scheduling.x-k8s.io", "PodGroup"): "scheduling.x-k8s.io_podgroups.yaml",
    ("trainer.kubeflow.org", "TrainJob"): "trainer.kubeflow.org_trainjobs.yaml",
    ("trainer.kubeflow.org", "ClusterTrainingRuntime"): "trainer.kubeflow.org_clustertrainingruntimes.yaml",
    ("jobset.x-k8s.io", "JobSet"): "jobset.x-k8s.io_jobsets.yaml",
    ("kueue.x-k8s.io", "AdmissionCheck"): "kueue.x-k8s.io_admissionchecks.yaml",
    ("kueue.x-k8s.io", "ProvisioningRequestConfig"): "kueue.x-k8s.io_provisioningrequestconfigs.yaml",
}
"""The published CRD (under ``SCHEMAS``) of each custom resource the components render. ``shared/schemas`` does not
carry Kueue's AdmissionCheck and ProvisioningRequestConfig (kubernetes-sigs/kueue v0.19.2
``config/components/crd/bases``): :func:`has_published_crd` says so, and the tests check those objects' fields."""


kubernetes_validate.utils.schema_contents = functools.cache(kubernetes_validate.utils.schema_contents)
"""kubernetes-validate reads a kind's schema and its 1.3 MB of shared definitions from its JSON files at every
``validate`` call (50 ms a call, some 300 calls in the unit tier); they never change, so each is read once
(``validate`` looks the function up at each call, and only reads what it returns)."""


def has_published_crd(obj: dict[str, Any]) -> bool:
    """Whether ``obj`` is a custom resource of :data:`CRD_FILES` whose CRD file is under ``SCHEMAS``."""
    name = CRD_FILES.get((obj["apiVersion"].split("/")[0], obj["kind"]))
    return name is not None and (SCHEMAS / name).is_file()


def _strict(node: Any) -> Any:
    """Forbid unknown fields wherever a schema lists properties (the API server prunes them)."""
    if isinstance(node, dict):
        out = {k: _strict(v) for k, v in node.items()}
        open_ended = "additionalProperties" in out or "x-kubernetes-preserve-unknown-fields" in out
        if "properties" in out and not open_ended:
            out["additionalProperties"] = False
        if isinstance(out.get("pattern"), str) and out["pattern"].startswith("^(?i)"):
            out["pattern"] = "(?i)^" + out["pattern"][5:]  # Go's RE2 takes a flag after ^, Python's re does not
        return out
    if isinstance(node, list):
        return [_strict(v) for v in node]
    return node


@functools.cache
def crd_validator(api_version: str, kind: str) -> jsonschema.Draft7Validator:
    """A strict validator for ``kind`` at ``api_version`` from the published CRD's matching version."""
    group, version = api_version.split("/")
    # libyaml's safe loader where PyYAML has it: a CRD is up to 0.9 MB of YAML, 1 to 2 s each for the pure-Python
    # loader (6.5 s for them all, 0.7 s with libyaml's; the same objects).
    text = (SCHEMAS / CRD_FILES[(group, kind)]).read_text()
    crd = yaml.load(text, Loader=yaml.CSafeLoader) if yaml.__with_libyaml__ else yaml.safe_load(text)
    entry = next(v for v in crd["spec"]["versions"] if v["name"] == version)
    return jsonschema.Draft7Validator(_strict(copy.deepcopy(entry["schema"]["openAPIV3Schema"])))


def validate_manifest(obj: dict[str, Any]) -> None:
    """Validate one object: custom resources against their CRD, built-ins with kubernetes-validate (strict).

    Raises:
        jsonschema.ValidationError: The object does not match its schema.
    """
    if (obj["apiVersion"].split("/")[0], obj["kind"]) in CRD_FILES:
        crd_validator(obj["apiVersion"], obj["kind"]).validate(obj)
    else:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def _closed(properties: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "additionalProperties": False, **extra}


_STRINGS = {"type": "array", "items": {"type": "string"}}
_PATCHES_6902 = {
    "type": "array",
    "items": _closed(
        {k: {"type": "string"} for k in ("group", "version", "kind", "patch")},
        required=["group", "version", "kind", "patch"],
    ),
}
KIND_CLUSTER_SCHEMA = _closed(
    {
        "kind": {"const": "Cluster"},
        "apiVersion": {"const": "kind.x-k8s.io/v1alpha4"},
        "name": {"type": "string"},
        "nodes": {
            "type": "array",
            "items": _closed(
                {
                    "role": {"enum": ["control-plane", "worker"]},
                    "image": {"type": "string"},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "extraMounts": {
                        "type": "array",
                        "items": _closed(
                            {
                                "containerPath": {"type": "string"},
                                "hostPath": {"type": "string"},
                                "readOnly": {"type": "boolean"},
                                "selinuxRelabel": {"type": "boolean"},
                                "propagation": {"enum": ["None", "HostToContainer", "Bidirectional"]},
                            }
                        ),
                    },
                    "extraPortMappings": {
                        "type": "array",
                        "items": _closed(
                            {
                                "containerPort": {"type": "integer"},
                                "hostPort": {"type": "integer"},
                                "listenAddress": {"type": "string"},
                                "protocol": {"enum": ["TCP", "UDP", "SCTP"]},
                            }
                        ),
                    },
                    "gpus": {"type": "string"},
                    "kubeadmConfigPatches": _STRINGS,
                    "kubeadmConfigPatchesJSON6902": _PATCHES_6902,
                }
            ),
        },
        "networking": _closed(
            {
                "ipFamily": {"enum": ["ipv4", "ipv6", "dual"]},
                "apiServerPort": {"type": "integer"},
                "apiServerAddress": {"type": "string"},
                "podSubnet": {"type": "string"},
                "serviceSubnet": {"type": "string"},
                "disableDefaultCNI": {"type": "boolean"},
                "kubeProxyMode": {"enum": ["iptables", "ipvs", "nftables", "none"]},
                "dnsSearch": _STRINGS,
            }
        ),
        "featureGates": {"type": "object", "additionalProperties": {"type": "boolean"}},
        "runtimeConfig": {"type": "object", "additionalProperties": {"type": "string"}},
        "kubeadmConfigPatches": _STRINGS,
        "kubeadmConfigPatchesJSON6902": _PATCHES_6902,
        "containerdConfigPatches": _STRINGS,
        "containerdConfigPatchesJSON6902": _STRINGS,
    },
    required=["kind", "apiVersion"],
)
"""kind's ``Cluster`` config, transcribed from sigs.k8s.io/kind ``pkg/apis/config/v1alpha4/types.go``.

Closed objects everywhere: kind decodes its config strictly and rejects unknown fields.
"""
