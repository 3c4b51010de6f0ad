"""The ephemeral test cluster, once per session, for the tests marked ``cluster``; and a namespace per test.

The fixture builds what is not cached (``python -m testbed.cluster build``), starts the cluster attached
to this process (killing the test run takes the cluster with it) and stops it at the end of the session.
``pytest -m "not cluster"`` deselects these tests, and the cluster is never started.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client, config

from testbed.cluster import lifecycle, podsbuild, realnode
from testbed.cluster.build import build_all
from testbed.cluster.lifecycle import Cluster
from testbed.cluster.realnode import RealNode
from testbed.cluster.waiting import wait_for


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A running test cluster (API server, controller manager, scheduler, kwok nodes)."""
    build_all(report=lambda _line: None)
    running = lifecycle.start(tmp_path_factory.mktemp("cluster") / "state")
    yield running
    running.stop()


@pytest.fixture(scope="session")
def real_node(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealNode]:
    """The node that really runs containers (``testbed/cluster/realnode.py``) beside the test cluster, for the
    session: builds the ``pods`` part when it is not cached (``python -m testbed.cluster build --with pods``:
    Debian's containerd, runc and CNI plugins, the kubelet, CoreDNS), starts containerd, CoreDNS and the kubelet,
    waits until node ``real-0`` is Ready, and stops them (every container with them) at the end."""
    podsbuild.build(report=lambda _line: None)
    with realnode.running(cluster, tmp_path_factory.mktemp("real-node")) as node:
        yield node


@pytest.fixture(scope="session")
def api(cluster: Cluster) -> client.ApiClient:
    """An admin API client of the test cluster."""
    return config.new_client_from_config(str(cluster.kubeconfig))


@pytest.fixture
def namespace(api: client.ApiClient) -> Iterator[str]:
    """A fresh namespace with its ``default`` ServiceAccount (pods are refused until the controller manager
    made it), deleted after the test."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": name}})
    wait_for(lambda: core.read_namespaced_service_account("default", name), 60, f"namespace {name}'s ServiceAccount")
    yield name
    core.delete_namespace(name)
