"""The pure parts of running the Trainer's Helm release's managers out of cluster (``testbed/cluster/trainerchart.py``):
which manager a Deployment is, the configuration it mounts, a token kubeconfig, and the release's webhooks pointed
at the managers' processes."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import yaml

from testbed.cluster import trainer, trainerchart

pytestmark = pytest.mark.unit


def deployment(name: str, volumes: list[dict[str, Any]]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"template": {"spec": {"volumes": volumes}}}}


def test_the_jobset_deployment_is_jobsets_manager_and_the_other_the_trainers() -> None:
    assert trainerchart.manager_of(deployment("jobset-controller", [])) is trainer.JOBSET
    assert trainerchart.manager_of(deployment("kubeflow-trainer-controller-manager", [])) is trainer.TRAINER


def test_the_release_config_is_the_one_configmap_the_pod_mounts_parsed() -> None:
    made = deployment("kubeflow-trainer-controller-manager", [
        {"name": "webhook-cert", "secret": {"secretName": "cert"}},
        {"name": "manager-config", "configMap": {"name": "kubeflow-trainer-config"}}])
    configmaps = {"kubeflow-trainer-config": {"controller_manager_config.yaml": "kind: Configuration\nqps: 50\n"},
                  "other": {"a": "b: 1"}}
    assert trainerchart.release_config(made, configmaps) == {"kind": "Configuration", "qps": 50}
    with pytest.raises(ValueError, match="expected one of one key"):
        trainerchart.release_config(deployment("x", []), configmaps)


def test_a_token_kubeconfig_keeps_the_admins_server_and_ca_and_only_the_token_as_user() -> None:
    admin = {"clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443",
                                                    "certificate-authority": "/pki/ca.crt"}}],
             "users": [{"name": "admin", "user": {"client-certificate": "/pki/admin.crt"}}]}
    made = yaml.safe_load(trainerchart.token_kubeconfig(admin, "t0ken"))
    assert made["clusters"][0]["cluster"] == admin["clusters"][0]["cluster"]
    assert made["users"] == [{"name": "token", "user": {"token": "t0ken"}}]
    assert made["contexts"][0]["context"] == {"cluster": "cluster", "user": "token"}


def hook(name: str, path: str, namespace: str = "kubeflow-system") -> dict[str, Any]:
    return {"name": name, "clientConfig": {"service": {"name": "svc", "namespace": namespace, "path": path}},
            "rules": [{"operations": ["CREATE"]}], "failurePolicy": "Fail"}


def test_the_release_webhooks_call_the_manager_serving_their_path_on_loopback_and_keep_their_rules() -> None:
    configuration = {"webhooks": [hook("validator.trainjob.trainer.kubeflow.org",
                                       "/validate-trainer-kubeflow-org-v1alpha1-trainjob"),
                                  hook("mutate--v1-pod.x-k8s.io", "/mutate--v1-pod"),
                                  hook("validate-jobset-x-k8s-io-v1alpha2-jobset.x-k8s.io",
                                       "/validate-jobset-x-k8s-io-v1alpha2-jobset"),
                                  hook("someone.else", "/x", namespace="elsewhere")]}
    made = trainerchart.pointed_at(configuration, "kubeflow-system", {"trainer": 9443, "jobset": 9444}, b"CA")
    bundle = base64.b64encode(b"CA").decode()
    assert [h["clientConfig"] for h in made] == [
        {"url": "https://127.0.0.1:9443/validate-trainer-kubeflow-org-v1alpha1-trainjob", "caBundle": bundle},
        {"url": "https://127.0.0.1:9444/mutate--v1-pod", "caBundle": bundle},
        {"url": "https://127.0.0.1:9444/validate-jobset-x-k8s-io-v1alpha2-jobset", "caBundle": bundle},
        configuration["webhooks"][3]["clientConfig"]]
    assert all(h["rules"] == [{"operations": ["CREATE"]}] and h["failurePolicy"] == "Fail" for h in made)


def test_a_configuration_calling_no_service_of_the_release_is_left_alone_and_an_unknown_path_refused() -> None:
    assert trainerchart.pointed_at({"webhooks": [hook("a", "/x", namespace="other")]}, "kubeflow-system",
                                   {"trainer": 1, "jobset": 2}, b"CA") == []
    with pytest.raises(ValueError, match="no manager serves"):
        trainerchart.pointed_at({"webhooks": [hook("a", "/validate-something")]}, "kubeflow-system",
                                {"trainer": 1, "jobset": 2}, b"CA")
