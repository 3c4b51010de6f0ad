"""A job's storage: Kubernetes volumes and their mounts, the claims the job creates, and the checkpoint dir.

Volumes and mounts are given in Kubernetes' own shape (``core/v1`` ``Volume`` and ``VolumeMount``), so any
source works: ``persistentVolumeClaim`` by name, ``emptyDir`` with a ``sizeLimit``, ``configMap``, ``secret``,
``csi`` (e.g. the Mountpoint for S3 driver), ``nfs``, ``ephemeral``... Claims the job creates are
PersistentVolumeClaim templates (``metadata.name`` and ``spec``, as a StatefulSet's ``volumeClaimTemplates``),
created under their own names in the job's namespace: every pod of every backend mounts the same claim by
name, so a replaced pod, an elastic job's new pod and the next run of the job get the same data back.

``checkpoint_dir`` is the convenience: one shared claim (ReadWriteMany, e.g. EFS or FSx for Lustre) mounted at
the same path in every pod, and :data:`CHECKPOINT_DIR_ENV` telling every rank where it is.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from components.errors import InvalidJobArgs
from components.job import checks
from components.job.inputchecks import frozen
from runtime.agent import contract

BUNDLE_VOLUME = "trainplane-runtime"
SHM_VOLUME = "dshm"
SHM_PATH = "/dev/shm"  # noqa: S108 - the shared-memory mount, not a temp file
CHECKPOINT_VOLUME = "trainplane-checkpoints"
CHECKPOINT_DIR_ENV = "CHECKPOINT_DIR"
"""Set in every rank's environment to ``checkpoint_dir`` when it is given (the agent passes the container's
environment on to the ranks; only ``TRAINPLANE_*`` variables are withheld)."""
RESERVED_VOLUMES = (BUNDLE_VOLUME, SHM_VOLUME, CHECKPOINT_VOLUME)
"""Volume names trainplane gives its own volumes."""
RESERVED_PATHS = (contract.BUNDLE_MOUNT_PATH, SHM_PATH)
"""Mount paths trainplane mounts its own volumes at."""
VOLUME_SOURCES = frozenset({
    "awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "configMap", "csi", "downwardAPI",
    "emptyDir", "ephemeral", "fc", "flexVolume", "flocker", "gcePersistentDisk", "gitRepo", "glusterfs",
    "hostPath", "image", "iscsi", "nfs", "persistentVolumeClaim", "photonPersistentDisk", "portworxVolume",
    "projected", "quobyte", "rbd", "scaleIO", "secret", "storageos", "vsphereVolume",
})
"""The members of ``VolumeSource`` (k8s.io/api ``core/v1/types.go``, Kubernetes 1.33): a Volume has its
``name`` and exactly one of these."""
MOUNT_KEYS = frozenset({"name", "mountPath", "subPath", "subPathExpr", "readOnly", "recursiveReadOnly",
                        "mountPropagation"})
"""The fields of ``VolumeMount`` (k8s.io/api ``core/v1/types.go``)."""
CLAIM_KEYS = frozenset({"metadata", "spec"})
RWX = "ReadWriteMany"
DELETE = "Delete"
RETAIN = "Retain"
CLAIM_RETENTIONS = (DELETE, RETAIN)
"""The values of ``claim_retention``: those of a StatefulSet's ``persistentVolumeClaimRetentionPolicy.whenDeleted``
(k8s.io/api ``apps/v1/types.go``). Kubernetes retains a StatefulSet's claims by default; trainplane deletes the
claims a job creates with the job by default, as ``pulumi destroy`` removes what the stack made (the aws-gpu
stack deletes the EFS file system too), and an FSx for Lustre claim costs about $170 a month while it exists."""


def check_volumes(value: Any) -> tuple[Mapping[str, Any], ...]:
    """The check of ``volumes``: Kubernetes Volume objects, each a name (a DNS-1123 label none of trainplane's
    own) and exactly one source.

    Raises:
        InvalidJobArgs: names the volume and the fix.
    """
    kept = frozen(value)
    checks.require_list("volumes", kept)
    for i, volume in enumerate(kept):
        field = f"volumes[{i}]"
        if not isinstance(volume, Mapping) or "name" not in volume:
            raise InvalidJobArgs(field, volume, "not a Kubernetes Volume", 'use {"name": ..., <one source>: {...}}')
        checks.require_dns1123_label(f"{field}.name", volume["name"])
        if volume["name"] in RESERVED_VOLUMES:
            raise InvalidJobArgs(f"{field}.name", volume["name"], "is the name of a volume trainplane mounts",
                                 "pick another name")
        sources = sorted(set(volume) - {"name"})
        if len(sources) != 1 or sources[0] not in VOLUME_SOURCES:
            raise InvalidJobArgs(field, volume, f"a Volume has exactly one source, this has {sources}",
                                 f"keep one of {sorted(VOLUME_SOURCES)}")
    return kept


def check_mounts(value: Any) -> tuple[Mapping[str, Any], ...]:
    """The check of ``volume_mounts``: VolumeMount objects at absolute paths trainplane does not use.

    Raises:
        InvalidJobArgs: names the mount and the fix.
    """
    kept = frozen(value)
    checks.require_list("volume_mounts", kept)
    for i, mount in enumerate(kept):
        field = f"volume_mounts[{i}]"
        if not isinstance(mount, Mapping) or not {"name", "mountPath"} <= set(mount) <= MOUNT_KEYS:
            raise InvalidJobArgs(field, mount, "not a Kubernetes VolumeMount",
                                 f'use {{"name": <volume>, "mountPath": "/data"}} with keys from {sorted(MOUNT_KEYS)}')
        checks.require_absolute_path(f"{field}.mountPath", mount["mountPath"])
        if mount["mountPath"].rstrip("/") in RESERVED_PATHS:
            raise InvalidJobArgs(f"{field}.mountPath", mount["mountPath"], "trainplane mounts its own volume there",
                                 "mount it elsewhere")
    return kept


def check_claims(value: Any) -> None:
    """The check of ``claims``: PersistentVolumeClaim templates with a name and a storage request.

    Raises:
        InvalidJobArgs: names the claim and the fix.
    """
    checks.require_list("claims", value)
    names: list[str] = []
    for i, claim in enumerate(value):
        field = f"claims[{i}]"
        fix = ('use {"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteMany"], '
               '"storageClassName": "efs", "resources": {"requests": {"storage": "100Gi"}}}}')
        if not isinstance(claim, Mapping) or set(claim) != CLAIM_KEYS or not isinstance(claim["spec"], Mapping):
            raise InvalidJobArgs(field, claim, "not a PersistentVolumeClaim template (metadata and spec)", fix)
        name = (claim["metadata"] or {}).get("name") if isinstance(claim["metadata"], Mapping) else None
        checks.require_dns1123_subdomain(f"{field}.metadata.name", name)
        name = str(name)
        if name in names:
            raise InvalidJobArgs(f"{field}.metadata.name", name, "two claims have this name", "rename one")
        names.append(name)
        storage = ((claim["spec"].get("resources") or {}).get("requests") or {}).get("storage")
        checks.require_quantity(f"{field}.spec.resources.requests.storage", storage)
        if not claim["spec"].get("accessModes"):
            raise InvalidJobArgs(f"{field}.spec.accessModes", None, "a claim needs an access mode",
                                 f'set ["{RWX}"] for a claim every pod mounts, or ["ReadWriteOnce"] for one pod')


def check_storage(volumes: Sequence[Mapping[str, Any]], mounts: Sequence[Mapping[str, Any]],
                  claims: Sequence[Mapping[str, Any]], checkpoint_dir: Optional[str],
                  checkpoint_claim: Optional[str]) -> None:
    """The checks across the storage fields: every mount names a volume, no two volumes share a name or two
    mounts a path, and ``checkpoint_dir`` comes with its claim (RWX when the job creates it).

    Raises:
        InvalidJobArgs: the first that fails, naming the field and the fix.
    """
    names = [v["name"] for v in volumes]
    for i, name in enumerate(names):
        if names.index(name) != i:
            raise InvalidJobArgs(f"volumes[{i}].name", name, "two volumes have this name", "rename one")
    paths = [m["mountPath"].rstrip("/") for m in mounts] + ([checkpoint_dir.rstrip("/")] if checkpoint_dir else [])
    for i, mount in enumerate(mounts):
        if mount["name"] not in names:
            raise InvalidJobArgs(f"volume_mounts[{i}].name", mount["name"], f"no volume has this name ({names})",
                                 "add the volume to volumes or fix the name")
        if paths.count(paths[i]) > 1:
            raise InvalidJobArgs(f"volume_mounts[{i}].mountPath", mount["mountPath"], "two mounts share this path",
                                 "give each mount its own path (checkpoint_dir counts as one)")
    if (checkpoint_dir is None) != (checkpoint_claim is None):
        field, value = ("checkpoint_claim", checkpoint_claim) if checkpoint_dir is None else ("checkpoint_dir", None)
        raise InvalidJobArgs(field, value, "checkpoint_dir and checkpoint_claim go together",
                             "set checkpoint_dir to a path and checkpoint_claim to a ReadWriteMany claim, or neither")
    if checkpoint_dir is not None:
        checks.require_absolute_path("checkpoint_dir", checkpoint_dir)
        if checkpoint_dir.rstrip("/") in RESERVED_PATHS:
            raise InvalidJobArgs("checkpoint_dir", checkpoint_dir, "trainplane mounts its own volume there",
                                 "pick another path")
        created = {c["metadata"]["name"]: c for c in claims}
        claim = created.get(checkpoint_claim or "")
        if claim is not None and RWX not in claim["spec"]["accessModes"]:
            raise InvalidJobArgs("checkpoint_claim", checkpoint_claim,
                                 f"every pod mounts the checkpoint claim, so it must be {RWX} "
                                 f"(it is {list(claim['spec']['accessModes'])})",
                                 f'set its spec.accessModes to ["{RWX}"] (EFS, FSx for Lustre, NFS)')


def pod_volumes(volumes: Sequence[Mapping[str, Any]], checkpoint_claim: Optional[str]) -> list[dict[str, Any]]:
    """The user's volumes, then the checkpoint claim's."""
    extra = ([{"name": CHECKPOINT_VOLUME, "persistentVolumeClaim": {"claimName": checkpoint_claim}}]
             if checkpoint_claim is not None else [])
    return [*(dict(v) for v in volumes), *extra]


def container_mounts(mounts: Sequence[Mapping[str, Any]], checkpoint_dir: Optional[str]) -> list[dict[str, Any]]:
    """The user's mounts, then the checkpoint dir's."""
    extra = [{"name": CHECKPOINT_VOLUME, "mountPath": checkpoint_dir}] if checkpoint_dir is not None else []
    return [*(dict(m) for m in mounts), *extra]


def retained(body: Mapping[str, Any], retention: str) -> bool:
    """Whether ``body`` is a claim the job creates that ``pulumi destroy`` leaves in the cluster (``Retain``)."""
    return body["kind"] == "PersistentVolumeClaim" and retention == RETAIN


def claim_manifest(claim: Mapping[str, Any], namespace: Any, labels: Any, annotations: Mapping[str, str]
                   ) -> dict[str, Any]:
    """One claim the job creates: a ``v1`` PersistentVolumeClaim named as its template is, in the job's
    namespace, with the job's labels."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim["metadata"]["name"], "namespace": namespace, "labels": labels,
                     "annotations": dict(annotations)},
        "spec": dict(claim["spec"]),
    }
