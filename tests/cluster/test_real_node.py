"""The real node (``testbed/cluster/realnode.py``): a pod bound to it runs in a container (containerd, runc, the
CNI bridge) and its output comes back through the API server from the kubelet (issue 22, item 1)."""

from __future__ import annotations

import ipaddress
import sys
from typing import Any

import pytest
from kubernetes import client

from testbed.cluster import images, realnode
from testbed.cluster.realnode import RealNode
from testbed.cluster.waiting import wait_for
from tests.cluster.kube import create, live

pytestmark = pytest.mark.cluster

WAIT = 180.0
"""Seconds a pod may take to be created, run and finish on a busy 2-core machine."""


def python_pod(name: str, namespace: str, code: str) -> dict[str, Any]:
    """A pod of the job image on the real node running the host's Python on ``code``."""
    volumes, mounts = images.host_python_volumes()
    placement = realnode.placement()
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"restartPolicy": "Never", "nodeSelector": placement["node_selector"],
                     "tolerations": placement["tolerations"], "volumes": volumes,
                     "containers": [{"name": "main", "image": images.PYTHON_IMAGE,
                                     "command": [images.host_python(), "-c", code], "volumeMounts": mounts}]}}


def finished(api: client.ApiClient, body: dict[str, Any]) -> dict[str, Any] | None:
    """The pod ``body`` names once it has Succeeded or Failed, else None."""
    pod = live(api, body)
    return pod if pod is not None and pod["status"].get("phase") in ("Succeeded", "Failed") else None


def test_a_pod_on_the_real_node_runs_the_host_python_and_its_log_comes_back_through_the_api_server(
        real_node: RealNode, api: client.ApiClient, namespace: str) -> None:
    code = "import os, socket, sys; print('hello from', socket.gethostname(), sys.version_info[:2], os.getpid())"
    body = python_pod("hello", namespace, code)
    create(api, body)
    pod = wait_for(lambda: finished(api, body), WAIT, "pod hello to finish")
    log = client.CoreV1Api(api).read_namespaced_pod_log("hello", namespace)
    assert pod["status"]["phase"] == "Succeeded", (pod["status"], log)
    assert pod["spec"]["nodeName"] == realnode.NODE
    assert ipaddress.ip_address(pod["status"]["podIP"]) in ipaddress.ip_network(realnode.POD_SUBNET)
    assert log == f"hello from hello {sys.version_info[:2]} 1\n", log  # the pod's own hostname and pid namespace
