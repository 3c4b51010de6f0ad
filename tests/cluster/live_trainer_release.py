"""The ``TrainerV2`` add-on deployed with ``pulumi up`` from a local chart directory (its ``chart_path``): the real Helm
release of Kubeflow Trainer v2.3.0 with JobSet v0.12.0, whose CRDs, webhook configurations, RBAC and manager
configuration are the ones the Trainer's and JobSet's managers (built from their Go modules) then run with, and
whose add-on ClusterTrainingRuntime a 2-node ``backend="trainjob"`` job trains on, on the real node (issue 24).

The chart directory is assembled from the modules (``testbed/cluster/trainerchart.py``: the Trainer's
``charts/kubeflow-trainer``, JobSet's and LWS's charts as its dependencies). What of the release is exercised:

- the CRDs: the Trainer's three (the chart's ``templates/crd``) and JobSet's (its chart's ``crds/``) are the only
  ones installed (nothing else applies them in this module);
- the webhook configurations: the release's Mutating/ValidatingWebhookConfigurations (their rules, object
  selectors, failure policy) admit the runtime and the TrainJob; only each webhook's ``clientConfig`` is changed,
  from the release's Service to the manager's process on 127.0.0.1 (the API server cannot reach a Service here:
  no kube-proxy, and the release's pods are kwok's, which run nothing);
- RBAC: each manager runs as the release's ServiceAccount (a TokenRequest token), so with the chart's
  ClusterRoles and Roles only;
- the configuration: each manager reads its release's ConfigMap, with only what a process outside a pod changes
  (``trainer.OUT_OF_CLUSTER``: listeners, leader election, certificate management).

Not exercised: the release's Deployments' containers, Services, the webhook certificate Secrets and the managers'
own certificate rotation, metrics serving.

The add-on's ``pulumi up`` runs twice: first with no runtimes (``gang_schedulers=[]``: the release alone, whose
webhooks then get pointed at the managers), then with the plain runtime and the job (the release unchanged).

Run it by path (it needs ``build --with trainer`` and ``--with pods``):
``.venv/bin/python -m pytest -q tests/cluster/live_trainer_release.py``.
"""

from __future__ import annotations

import dataclasses
import json
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client, dynamic
from kubernetes.client.rest import ApiException

from components.addons.trainer import RELEASE_NAME
from components.addons.versions import TRAINER_API
from components.job.bundle import build_bundle
from components.job.render import render_job
from runtime.agent import contract
from testbed.agents import ROOT
from testbed.cluster import trainer, trainerchart
from testbed.cluster.engine import Engine
from testbed.cluster.lifecycle import Cluster
from testbed.cluster.pki import Pki
from testbed.cluster.project import cluster_stack, copy_project
from testbed.cluster.realnode import RealNode
from testbed.cluster.waiting import wait_for
from tests.cluster.controllers import loopback_ports
from tests.cluster.kube import delete_crd
from tests.cluster.live_trainer import jobset
from tests.cluster.live_trainer_real import WAIT, finished, logs_by_index, trainjob_args
from tests.components.componenttest import TOKEN, job_args

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(2400)]

RELEASE_NAMESPACE = "kubeflow-system"
"""The add-on's default namespace (``TrainerV2Args.namespace``)."""
CRDS = ("trainjobs.trainer.kubeflow.org", "clustertrainingruntimes.trainer.kubeflow.org",
        "trainingruntimes.trainer.kubeflow.org", "jobsets.jobset.x-k8s.io")

PROGRAM = textwrap.dedent('''
    import json
    import os

    import pulumi
    import pulumi_kubernetes as k8s

    from components.addons import TrainerV2
    from components.job import DistributedJob, DistributedJobArgs

    provider = k8s.Provider("cluster", kubeconfig=open(os.environ["KUBECONFIG"]).read())
    opts = pulumi.ResourceOptions(provider=provider)
    trainer = TrainerV2("trainer", {"chart_path": os.environ["TRAINER_CHART"],
                                    "gang_schedulers": json.loads(os.environ["TRAINER_RUNTIMES"])}, opts=opts)
    pulumi.export("runtimes", trainer.runtimes)
    if os.environ.get("JOB_ARGS"):
        job = DistributedJob("digits", DistributedJobArgs(**json.loads(os.environ["JOB_ARGS"])), opts=opts,
                             crd_dependencies=[trainer])
        pulumi.export("job", job.job_name)
''')
"""The add-on from the chart directory ``TRAINER_CHART`` with the runtimes ``TRAINER_RUNTIMES`` (JSON), and, when
``JOB_ARGS`` (JSON) is set, job ``digits`` on them."""


@dataclasses.dataclass
class Release:
    """The deployed release: the engine of its stack, and the namespace for jobs."""

    engine: Engine
    namespace: str


def start_managers(api: client.ApiClient, cluster: Cluster, pki: Pki, work: Path) -> list[trainer.Running]:
    """Each of the release's Deployments' manager as a process with the Deployment's ServiceAccount and ConfigMap
    (JobSet's first)."""
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    configmaps = {c.metadata.name: c.data or {} for c in core.list_namespaced_config_map(RELEASE_NAMESPACE).items}
    deployments = api.sanitize_for_serialization(apps.list_namespaced_deployment(RELEASE_NAMESPACE))["items"]
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    by_manager = {trainerchart.manager_of(d).name: d for d in deployments}
    assert sorted(by_manager) == ["jobset", "trainer"], [d["metadata"]["name"] for d in deployments]
    running: list[trainer.Running] = []
    try:
        for manager in (trainer.JOBSET, trainer.TRAINER):
            deployment = by_manager[manager.name]
            account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
            token = core.create_namespaced_service_account_token(
                account, RELEASE_NAMESPACE, {"spec": {"expirationSeconds": 7200}}).status.token
            kubeconfig = work / f"{manager.name}.kubeconfig"
            kubeconfig.write_text(trainerchart.token_kubeconfig(admin, token))
            running.append(trainer.start(manager, kubeconfig, pki, loopback_ports(3),
                                         base_config=trainerchart.release_config(deployment, configmaps)))
    except BaseException:
        for started in running:
            started.stop()
        raise
    return running


def point_webhooks(api: client.ApiClient, running: list[trainer.Running], ca: bytes) -> list[str]:
    """Point the release's webhooks at the running managers; returns the names of the configurations changed."""
    admission = client.AdmissionregistrationV1Api(api)
    ports = {r.manager.name: r.webhook_port for r in running}
    changed = []
    for listing, patch in ((admission.list_mutating_webhook_configuration,
                            admission.patch_mutating_webhook_configuration),
                           (admission.list_validating_webhook_configuration,
                            admission.patch_validating_webhook_configuration)):
        for configuration in api.sanitize_for_serialization(listing())["items"]:
            hooks = trainerchart.pointed_at(configuration, RELEASE_NAMESPACE, ports, ca)
            if hooks:
                patch(configuration["metadata"]["name"], [{"op": "replace", "path": "/webhooks", "value": hooks}])
                changed.append(str(configuration["metadata"]["name"]))
    return changed


@pytest.fixture(scope="module")
def release(cluster: Cluster, api: client.ApiClient, real_node: RealNode,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    """``pulumi up`` of the add-on from the assembled chart with no runtimes, the managers started as the release's
    and its webhooks pointed at them, and a namespace for jobs; ``pulumi destroy`` afterwards (JobSet's CRD, which
    Helm leaves installed as every ``crds/`` CRD, is deleted too)."""
    work = tmp_path_factory.mktemp("trainer-release")
    chart = trainerchart.local_chart(work / "chart")
    core = client.CoreV1Api(api)
    namespace = f"trainer-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": namespace}})
    wait_for(lambda: core.read_namespaced_service_account("default", namespace), 60, "the default ServiceAccount")
    project = copy_project(work / "project", "dev", cluster_stack("existing", cluster.kubeconfig).config)
    (project / "__main__.py").write_text(PROGRAM)
    engine = Engine(project, work / "state", cluster.kubeconfig, {"TRAINER_CHART": str(chart),
                                                                  "TRAINER_RUNTIMES": "[]"})
    engine.run("stack", "init", "dev")
    running: list[trainer.Running] = []
    try:
        engine.run("up", "--yes", timeout=1200)
        pki = Pki(cluster.state / "pki")
        running = start_managers(api, cluster, pki, work)
        changed = point_webhooks(api, running, pki.ca.read_bytes())
        assert len(changed) == 4, changed  # the Trainer's and JobSet's mutating and validating configurations
        yield Release(engine, namespace)
    finally:
        engine.run("destroy", "--yes", timeout=1200, check=False)
        for started in running:
            started.stop()
        core.delete_namespace(namespace)
        extensions = client.ApiextensionsV1Api(api)
        for name in CRDS:
            if any(c.metadata.name == name for c in extensions.list_custom_resource_definition().items):
                delete_crd(api, name)


def helm_revisions(api: client.ApiClient) -> list[str]:
    """The release's revisions, as Helm stores them (a Secret ``sh.helm.release.v1.<release>.v<revision>``)."""
    found = client.CoreV1Api(api).list_namespaced_secret(RELEASE_NAMESPACE, label_selector=f"name={RELEASE_NAME}")
    return sorted(s.metadata.labels["version"] for s in found.items)


def test_the_add_on_from_a_local_chart_is_a_helm_release_whose_webhooks_admit_its_runtime_and_a_trainjob_trains(
        api: client.ApiClient, release: Release) -> None:
    """The release installs the four CRDs (kubeflow/trainer v2.3.0 ``charts/kubeflow-trainer/templates/crd``,
    kubernetes-sigs/jobset v0.12.0 ``charts/jobset/crds``) and runs no runtime installer (``runtimes.defaultEnabled:
    false``, ``values.yaml``); the add-on's ClusterTrainingRuntime passes the release's validating webhook
    (``validator.clustertrainingruntime.trainer.kubeflow.org``, ``templates/webhook/
    validating_webhook_configuration.yaml``) and the second ``up`` leaves the release at its first revision (its
    inputs unchanged). The release's TrainJob webhook refuses a TrainJob whose ``trainer.env`` sets a variable the
    torch plugin sets (``pkg/runtime/framework/plugins/torch/torch.go``, ``Validate``:
    ``constants.TorchRunReservedEnvNames``), so that webhook is the one serving. Then the job's TrainJob becomes a
    JobSet whose pods train on the real node to the held-out accuracy of a world of 4, and the TrainJob is Complete
    (``pkg/runtime/framework/plugins/jobset/jobset.go``, ``Status``)."""
    extensions = client.ApiextensionsV1Api(api)
    installed = {c.metadata.name: c for c in extensions.list_custom_resource_definition().items}
    assert set(CRDS) <= set(installed), sorted(installed)
    for name in CRDS[:3]:  # a template's objects carry the release's ownership annotations; crds/ ones do not
        annotations = installed[name].metadata.annotations or {}
        assert annotations.get("meta.helm.sh/release-name") == RELEASE_NAME, (name, annotations)
    assert helm_revisions(api) == ["1"]

    namespace = release.namespace
    args = trainjob_args(namespace, script=str(ROOT / "examples" / "ddp_digits.py"), workers=2, num_proc=2,
                         args=["--epochs", "3", "--checkpoint", "/tmp/ddp_digits.pt"])
    engine = dataclasses.replace(release.engine, extra_env={**release.engine.extra_env,
                                                            "TRAINER_RUNTIMES": '["none"]',
                                                            "JOB_ARGS": json.dumps(args)})
    engine.run("up", "--yes", timeout=1200)
    runtimes = dynamic.DynamicClient(api).resources.get(api_version=TRAINER_API, kind="ClusterTrainingRuntime")
    made = runtimes.get(name="trainplane").to_dict()
    assert made["metadata"]["labels"][contract.LABEL_MANAGED_BY] == "pulumi"
    assert helm_revisions(api) == ["1"]

    refused = render_job("refused", job_args(namespace=namespace, backend="trainjob"), TOKEN,
                         build_bundle()).manifests
    (body,) = [m.body for m in refused if m.body["kind"] == "TrainJob"]
    body["spec"]["trainer"]["env"].append({"name": contract.PET_NNODES, "value": "1"})
    with pytest.raises(ApiException) as denied:
        dynamic.DynamicClient(api).resources.get(api_version=TRAINER_API, kind="TrainJob").create(
            body=body, namespace=namespace)
    assert "validator.trainjob.trainer.kubeflow.org" in str(denied.value.body), denied.value.body

    condition = wait_for(lambda: finished(api, namespace, "digits"), WAIT, "TrainJob digits to finish")
    logs = logs_by_index(api, namespace, "digits")
    assert condition["type"] == "Complete", (condition, logs)
    found = jobset(api, namespace, "digits")
    assert found is not None and any(c["type"] == "Completed" and c["status"] == "True"
                                     for c in found["status"]["conditions"]), found
    assert "held-out accuracy" in logs["0"] and "world size 4" in logs["0"], logs
