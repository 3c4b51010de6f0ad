"""What the render tests share: the backends and gang schedulers a job renders for, a job rendered by
the pure builders, and the parts of it they read."""

from __future__ import annotations

from typing import Any

from components.job.bundle import build_bundle
from components.job.render import Manifest, RenderedJob, render_job
from tests.components.componenttest import TOKEN, job_args

BUNDLE = build_bundle()
BACKENDS = {
    "indexed-job": ({}, ("batch/v1", "Job")),
    "pytorchjob": ({"backend": "pytorchjob"}, ("kubeflow.org/v1", "PyTorchJob")),
    "pytorchjob-elastic": (
        {"backend": "pytorchjob", "min_workers": 1, "max_workers": 4},
        ("kubeflow.org/v1", "PyTorchJob"),
    ),
    "statefulset": ({"mode": "service"}, ("apps/v1", "StatefulSet")),
}
VOLCANO_PG = ("scheduling.volcano.sh/v1beta1", "PodGroup")
COSCHED_PG = ("scheduling.x-k8s.io/v1alpha1", "PodGroup")
LOCAL_QUEUE = ("kueue.x-k8s.io/v1beta2", "LocalQueue")
GANGS = {
    "none": {},
    "volcano": {"gang_scheduler": "volcano", "queue": "research"},
    "scheduler-plugins": {"gang_scheduler": "scheduler-plugins"},
    "kueue-queue": {"gang_scheduler": "kueue", "queue": "team-a"},
    "kueue-cluster-queue": {"gang_scheduler": "kueue", "cluster_queue": "gpu-pool"},
}
COMMON_KINDS = {
    ("v1", "Secret"),
    ("v1", "ConfigMap"),
    ("v1", "Service"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
}
FULL = {
    "workers": 3,
    "quorum_workers": 3,
    "gpus": 2,
    "num_proc": "auto",
    "cpus": 7.5,
    "memory": "60Gi",
    "shm_size": "8Gi",
    "tolerations": [{"key": "team", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
    "node_selector": {"nvidia.com/gpu.present": "true"},
    "env": {"NCCL_DEBUG": "INFO"},
    "labels": {"team": "ml"},
    "service_account": "trainer",
    "working_dir": "/workspace",
    "image_pull_policy": "IfNotPresent",
    "log_dir": "/var/log/trainplane",
    "namespace": "research",
    "allow_from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "clients"}}}],
    "args": ["--epochs", "3"],
}


def render(name: str = "demo", **overrides: Any) -> RenderedJob:
    return render_job(name, job_args(**overrides), TOKEN, BUNDLE)


def within_kueue(overrides: dict[str, Any]) -> dict[str, Any]:
    """Elastic bounds Kueue can honour: it keeps a job at the pod count it admitted, so no growth."""
    if overrides.get("gang_scheduler") == "kueue" and "max_workers" in overrides:
        return {**overrides, "max_workers": overrides.get("workers", 2)}
    return overrides


def expected_kinds(backend: str, gang: str) -> set[tuple[str, str]]:
    kinds = COMMON_KINDS | {BACKENDS[backend][1]}
    if backend == "statefulset":
        kinds.add(("policy/v1", "PodDisruptionBudget"))
    operator_gang = backend.startswith("pytorchjob")
    if gang == "volcano" and not operator_gang:
        kinds.add(VOLCANO_PG)
    if gang == "scheduler-plugins" and not operator_gang:
        kinds.add(COSCHED_PG)
    if gang == "kueue-cluster-queue":
        kinds.add(LOCAL_QUEUE)
    return kinds


def workload_manifest_of(job: RenderedJob) -> Manifest:
    return next(m for m in job.manifests if m.role in ("indexed-job", "statefulset", "pytorchjob"))


def workload(job: RenderedJob) -> dict[str, Any]:
    return workload_manifest_of(job).body


def templates(job: RenderedJob) -> list[dict[str, Any]]:
    spec = workload(job)["spec"]
    if "pytorchReplicaSpecs" in spec:
        return [r["template"] for r in spec["pytorchReplicaSpecs"].values()]
    return [spec["template"]]


def env_of(template: dict[str, Any]) -> dict[str, Any]:
    env = template["spec"]["containers"][0]["env"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in env}


def kind_of(job: RenderedJob, kind: str) -> dict[str, Any]:
    return next(m.body for m in job.manifests if m.body["kind"] == kind)
