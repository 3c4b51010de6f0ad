"""What Kubeflow Trainer v2, JobSet and the Job controller make of a TrainJob and its runtime: the JobSet, and
each node's pod with its environment resolved, transcribed from their sources for the env-contract tests.

Sources (read with the search tool, cited per step below):

* kubeflow/trainer v2.3.0 (658725bd): ``pkg/runtime/core/trainingruntime.go`` (``newRuntimeInfo``,
  ``mergeRuntimePatches``: runtime patches strategic-merged in list order, their template metadata added to
  the JobSet's labels and annotations, ``resourcesPerNode`` onto the ``node`` container), the torch plugin
  ``pkg/runtime/framework/plugins/torch/torch.go`` (``EnforceMLPolicy``: ``trainer.env`` then ``PET_*``
  upserted into the ``node`` container, port 29500), ``pkg/runtime/framework/plugins/coscheduling`` and
  ``volcano`` (``EnforcePodGroupPolicy``: the pod label or annotation naming the PodGroup),
  ``pkg/runtime/framework/plugins/jobset/jobset.go`` (``SyncParallelCount``, ``Build``) and ``builder.go``
  (``Trainer``: image, command, args), ``pkg/apply/apply.go`` (upserts: env by name, ports by number or name);
* kubernetes-sigs/jobset v0.12.0 (f22e565a): ``pkg/webhooks/jobset_webhook.go`` (``Default``: Indexed
  completion, DNS host names on, not-ready addresses published), ``pkg/controllers/jobset_controller.go``
  (``constructJob``: Job ``<jobset>-<replicated job>-<index>``, pod ``subdomain`` = ``GetSubdomain``, the
  JobSet's name unless set; the headless Service of that name selecting ``jobset.sigs.k8s.io/jobset-name``);
* kubernetes/kubernetes ``pkg/controller/job/indexed_job_utils.go`` (``addCompletionIndexEnvVariables``:
  ``JOB_COMPLETION_INDEX`` from the pod's completion-index annotation in every container; the pod's host name
  ``<job>-<index>``); strategic merge as ``k8s.io/apimachinery/pkg/util/strategicpatch`` does it for the
  lists these objects hold, with the merge keys of ``k8s.io/api`` (containers, volumes, env by ``name``,
  volume mounts by ``mountPath``, ports by ``containerPort``; JobSet's ``replicatedJobs`` by ``name``,
  ``api/jobset/v1alpha2/jobset_types.go``), every other list replaced.
"""

from __future__ import annotations

import copy
from typing import Any

NODE = "node"
TRAINER_PORT = 29500
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
INDEX_PATH = f"metadata.annotations['{COMPLETION_INDEX}']"
COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"
VOLCANO_GROUP = "scheduling.k8s.io/group-name"
MERGE_KEYS = {"replicatedJobs": "name", "containers": "name", "initContainers": "name", "volumes": "name",
              "env": "name", "volumeMounts": "mountPath", "ports": "containerPort", "imagePullSecrets": "name"}


def strategic_merge(base: Any, patch: Any, key: str = "") -> Any:
    """``patch`` merged into ``base``: maps by key, the lists of :data:`MERGE_KEYS` by their merge key (items
    merged in place, new ones appended), anything else replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            out[k] = strategic_merge(base[k], v, k) if k in base else copy.deepcopy(v)
        return out
    if isinstance(base, list) and isinstance(patch, list) and key in MERGE_KEYS:
        merge_key = MERGE_KEYS[key]
        out_list = [copy.deepcopy(item) for item in base]
        for item in patch:
            at = next((i for i, old in enumerate(out_list) if old.get(merge_key) == item.get(merge_key)), None)
            if at is None:
                out_list.append(copy.deepcopy(item))
            else:
                out_list[at] = strategic_merge(out_list[at], item)
        return out_list
    return copy.deepcopy(patch)


def upsert(items: list[dict[str, Any]], new: dict[str, Any], *keys: str) -> None:
    """``apply.upsert``: replace the first item matching ``new`` on any of ``keys``, else append."""
    for i, old in enumerate(items):
        if any(old.get(k) is not None and old.get(k) == new.get(k) for k in keys):
            items[i] = new
            return
    items.append(new)


def trainer_job(spec: dict[str, Any]) -> dict[str, Any]:
    """The replicated job labelled the trainer's ancestor."""
    return next(r for r in spec["replicatedJobs"]
                if r["template"].get("metadata", {}).get("labels", {}).get(
                    "trainer.kubeflow.org/trainjob-ancestor-step") == "trainer")


def node_container(pod_spec: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in pod_spec["containers"] if c["name"] == NODE)


def jobset_of(runtime: dict[str, Any], trainjob: dict[str, Any]) -> dict[str, Any]:
    """The JobSet the Trainer builds from ``runtime`` (a ClusterTrainingRuntime) and ``trainjob``, after
    JobSet's defaulting webhook."""
    name = trainjob["metadata"]["name"]
    template = copy.deepcopy(runtime["spec"]["template"])
    labels = dict(template.get("metadata", {}).get("labels", {}))
    annotations = dict(template.get("metadata", {}).get("annotations", {}))
    spec = template["spec"]
    for patch in trainjob["spec"].get("runtimePatches", []):
        patched = patch.get("trainingRuntimeSpec", {}).get("template", {})
        labels.update(patched.get("metadata", {}).get("labels", {}))
        annotations.update(patched.get("metadata", {}).get("annotations", {}))
        if "spec" in patched:
            spec = strategic_merge(spec, patched["spec"])
    trainer = trainjob["spec"]["trainer"]
    rjob = trainer_job(spec)
    pod = rjob["template"]["spec"]["template"]
    node = node_container(pod["spec"])
    if "resourcesPerNode" in trainer:
        node["resources"] = strategic_merge(node.get("resources", {}), trainer["resourcesPerNode"])
    count = trainer.get("numNodes", runtime["spec"]["mlPolicy"].get("numNodes", 1))
    env = node.setdefault("env", [])
    for item in trainer.get("env", []):
        upsert(env, item, "name")
    pet = [{"name": "PET_NNODES", "value": str(count)},
           {"name": "PET_NPROC_PER_NODE", "value": str(trainer["numProcPerNode"])},
           {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": INDEX_PATH}}},
           {"name": "PET_MASTER_ADDR", "value": f"{name}-{NODE}-0-0.{name}"},
           {"name": "PET_MASTER_PORT", "value": str(TRAINER_PORT)}]
    if "torch" in runtime["spec"]["mlPolicy"]:  # EnforceMLPolicy returns at once without it
        for item in pet:
            upsert(env, item, "name")
        upsert(node.setdefault("ports", []), {"containerPort": TRAINER_PORT}, "containerPort", "name")
    policy = runtime["spec"].get("podGroupPolicy", {})
    meta = pod.setdefault("metadata", {})
    if "coscheduling" in policy:
        meta.setdefault("labels", {})[COSCHEDULING_LABEL] = name
    if "volcano" in policy:
        meta.setdefault("annotations", {})[VOLCANO_GROUP] = name
    rjob["template"]["spec"]["parallelism"] = rjob["template"]["spec"]["completions"] = count
    rjob["replicas"] = 1
    for field in ("image", "command", "args"):
        if field in trainer:
            node[field] = trainer[field]
    rjob["template"]["spec"].setdefault("completionMode", "Indexed")
    network = spec.setdefault("network", {})
    network.setdefault("enableDNSHostnames", True)
    network.setdefault("publishNotReadyAddresses", True)
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": trainjob["metadata"].get("namespace", "default"),
                         "labels": labels, "annotations": annotations},
            "spec": spec}


def node_pod(jobset: dict[str, Any], index: int) -> dict[str, Any]:
    """Pod ``index`` of the JobSet's trainer Job, as JobSet and the Job controller make it."""
    name = jobset["metadata"]["name"]
    rjob = trainer_job(jobset["spec"])
    job_name = f"{name}-{rjob['name']}-0"
    pod = copy.deepcopy(rjob["template"]["spec"]["template"])
    meta = pod.setdefault("metadata", {})
    meta.setdefault("annotations", {})[COMPLETION_INDEX] = str(index)
    meta.setdefault("labels", {})["jobset.sigs.k8s.io/jobset-name"] = name
    meta["name"] = f"{job_name}-{index}-x7k2p"
    meta["namespace"] = jobset["metadata"]["namespace"]
    pod["spec"]["hostname"] = f"{job_name}-{index}"
    pod["spec"]["subdomain"] = jobset["spec"]["network"].get("subdomain") or name
    for container in pod["spec"]["containers"]:
        upsert(container.setdefault("env", []), {"name": "JOB_COMPLETION_INDEX",
                                                  "valueFrom": {"fieldRef": {"fieldPath": INDEX_PATH}}}, "name")
    return pod


def resolved_env(pod: dict[str, Any], pod_ip: str, secrets: dict[tuple[str, str], str]) -> dict[str, str]:
    """The ``node`` container's environment as the kubelet gives it: values, field references of this pod,
    Secret keys from ``secrets`` (``(name, key)`` to value). Later entries win, as in a container.

    Raises:
        KeyError: a reference this helper cannot resolve (so a test never passes on a dropped variable).
    """
    fields = {"status.podIP": pod_ip, "metadata.name": pod["metadata"]["name"],
              "metadata.namespace": pod["metadata"]["namespace"]}
    for key, value in pod["metadata"].get("annotations", {}).items():
        fields[f"metadata.annotations['{key}']"] = value
    env: dict[str, str] = {}
    for item in node_container(pod["spec"])["env"]:
        if "value" in item:
            env[item["name"]] = item["value"]
            continue
        source = item["valueFrom"]
        if "fieldRef" in source:
            env[item["name"]] = fields[source["fieldRef"]["fieldPath"]]
        else:
            ref = source["secretKeyRef"]
            env[item["name"]] = secrets[(ref["name"], ref["key"])]
    return env
