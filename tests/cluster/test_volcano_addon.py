"""The ``Volcano`` add-on through the real engine against the real API server (issue 21): installed from a local
chart (``chart_path``), its Queue created, and Volcano's ``default`` Queue given the annotation that makes Pulumi
wait until it is ``Open``, whichever of the add-on and Volcano's scheduler reaches that queue first.

Why no ``depends_on`` orders the two: nothing in the program stands for "the scheduler has made its queue".
volcano-sh/volcano v1.15.1's scheduler makes ``default`` at start-up (``pkg/scheduler/cache/cache.go``,
``newDefaultAndRootQueue``: Get, then Create with ``reclaimable: true, weight: 1``, an existing queue or
``AlreadyExists`` counting as done), and the chart gives the scheduler no readiness probe
(``installer/helm/chart/volcano/templates/scheduler.yaml``), so the release can be ready first. The patch is then
no race: pulumi-kubernetes applies a Patch resource with server-side apply, which creates a missing object
(provider/v4 at the pinned commit, ``provider/pkg/await/await.go``, ``Creation``: "we currently always upsert the
object"); Volcano's queue webhook gives a new queue the scheduler's values (``pkg/webhooks/admission/queues/
mutate/mutate_queue.go``: ``reclaimable`` true, ``weight`` 1), and the scheduler, finding it, leaves it be. Either
way there is one ``default`` Queue with the scheduler's spec and the annotation, and Pulumi waits for it to open.

The test cluster runs none of Volcano: the chart is a stand-in of the pinned name and version holding one
ConfigMap (the release's own templates are not exercised), the Queue CRD is Volcano's published one, the test
creates ``default`` as the scheduler does and sets the queues' ``status.state`` as its queue controller does
(``pkg/controllers/queue``); the admission webhooks are not run, so a queue the patch creates has the CRD's
default weight and no ``reclaimable``.
"""

from __future__ import annotations

import contextlib
import tempfile
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client, dynamic
from kubernetes.client.exceptions import ApiException

from components.addons.versions import VOLCANO, VOLCANO_API
from components.addons.volcano import BUILTIN_QUEUE
from components.awaiting import WAIT_FOR_ANNOTATION
from testbed.cluster import crds
from testbed.cluster.engine import Engine
from testbed.cluster.lifecycle import Cluster
from testbed.cluster.project import cluster_stack, copy_project
from testbed.cluster.waiting import wait_for
from tests.cluster.kube import WAIT

pytestmark = pytest.mark.cluster

PROGRAM = textwrap.dedent('''
    import os

    import pulumi
    import pulumi_kubernetes as k8s

    from components.addons import Volcano, VolcanoArgs

    provider = k8s.Provider("cluster", kubeconfig=open(os.environ["KUBECONFIG"]).read())
    volcano = Volcano("sched", VolcanoArgs(queue="research", namespace="{namespace}",
                                           chart_path=os.path.abspath("chart")),
                      opts=pulumi.ResourceOptions(provider=provider))
    pulumi.export("queue", volcano.queue)
''')
SCHEDULERS_QUEUE = {"reclaimable": True, "weight": 1}
"""The spec Volcano's scheduler gives the ``default`` Queue it creates (``newDefaultAndRootQueue``)."""


def queues(api: client.ApiClient) -> dynamic.Resource:
    return dynamic.DynamicClient(api).resources.get(api_version=VOLCANO_API, kind="Queue")


@pytest.fixture(scope="module")
def queue_crd(api: client.ApiClient) -> Iterator[None]:
    """Volcano's Queue CRD, applied and Established."""
    body = yaml.safe_load(crds.crd_file("scheduling.volcano.sh_queues.yaml").read_text())
    extensions = client.ApiextensionsV1Api(api)
    extensions.create_custom_resource_definition(body)

    def established() -> bool:
        crd = extensions.read_custom_resource_definition(body["metadata"]["name"])
        return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])

    wait_for(established, WAIT, "the Queue CRD to be Established")
    yield
    extensions.delete_custom_resource_definition(body["metadata"]["name"])


def open_queues(api: client.ApiClient, names: tuple[str, ...], stop: threading.Event) -> None:
    """Volcano's queue controller's part: set ``status.state: Open`` on each named queue once it exists."""
    resource, opened = queues(api), set()
    while not stop.is_set() and opened != set(names):
        for name in set(names) - opened:
            try:
                resource.status.patch(name=name, body={"status": {"state": "Open"}},
                                      content_type="application/merge-patch+json")
                opened.add(name)
            except ApiException:
                pass
        stop.wait(0.5)


def schedulers_create(api: client.ApiClient) -> int:
    """Create ``default`` as Volcano's scheduler does; the HTTP status (409 when it exists, which it takes as done)."""
    try:
        queues(api).create(body={"apiVersion": VOLCANO_API, "kind": "Queue", "metadata": {"name": BUILTIN_QUEUE},
                                 "spec": dict(SCHEDULERS_QUEUE)})
    except ApiException as refused:
        return int(refused.status)
    return 201


@pytest.mark.parametrize("first", ["scheduler", "add-on"])
def test_the_default_queue_is_annotated_and_awaited_whichever_comes_first(
        first: str, tmp_path: Path, cluster: Cluster, api: client.ApiClient, queue_crd: None) -> None:
    namespace = f"volcano-{first}"
    project = copy_project(tmp_path / "project", "dev", cluster_stack("existing", cluster.kubeconfig).config)
    (project / "__main__.py").write_text(PROGRAM.replace("{namespace}", namespace))
    chart = project / "chart"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text(yaml.safe_dump({"apiVersion": "v2", "name": VOLCANO.name,
                                                      "version": VOLCANO.version}))
    (chart / "templates" / "stand-in.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: volcano-stand-in\ndata:\n  chart: local\n")
    before = None
    if first == "scheduler":
        assert schedulers_create(api) == 201
        before = queues(api).get(name=BUILTIN_QUEUE).to_dict()["spec"]
    engine = Engine(project, tmp_path / "state", cluster.kubeconfig)
    shared_tmp = set(Path(tempfile.gettempdir()).glob("kubeconfig*"))
    engine.run("stack", "init", "dev")
    stop = threading.Event()
    opener = threading.Thread(target=open_queues, args=(api, ("research", BUILTIN_QUEUE), stop), daemon=True)
    opener.start()
    try:
        engine.run("up", "--yes", timeout=1200)
        if first == "add-on":
            assert schedulers_create(api) == 409, "the scheduler then finds its queue there"
        default = queues(api).get(name=BUILTIN_QUEUE).to_dict()
        assert default["metadata"]["annotations"][WAIT_FOR_ANNOTATION] == "jsonpath={.status.state}=Open"
        assert default["status"]["state"] == "Open"
        if first == "scheduler":
            assert default["spec"] == before, "the patch changed nothing of the scheduler's queue"
        else:
            assert "spec" not in default, "the patch created the queue with its annotation alone"
        research = queues(api).get(name="research").to_dict()["spec"]
        assert {k: research[k] for k in ("weight", "reclaimable")} == {"weight": 1, "reclaimable": True}
        stand_in = client.CoreV1Api(api).read_namespaced_config_map("volcano-stand-in", namespace)
        assert stand_in.data == {"chart": "local"}, "the release is the local chart's"
        assert engine.run("stack", "output", "queue").stdout.strip() == "research"
        assert list(Path(engine.env()["TMPDIR"]).glob("kubeconfig*")), "the provider's Helm kubeconfig, kept here"
        assert set(Path(tempfile.gettempdir()).glob("kubeconfig*")) == shared_tmp, "none left in the shared /tmp"
    finally:
        stop.set()
        engine.run("destroy", "--yes", timeout=1200, check=False)
        for name in (BUILTIN_QUEUE, "research"):
            with contextlib.suppress(ApiException):
                queues(api).delete(name=name)
        client.CoreV1Api(api).delete_namespace(namespace)
