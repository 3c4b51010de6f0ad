"""``backend="trainjob"`` at preview: what the Trainer cannot do is refused with the reason and the backend that
can; under Pulumi's mocks the component registers the TrainJob as rendered, replaced on any change; a cluster
without the Trainer or the runtime is refused (``components.job.fit``)."""

from __future__ import annotations

from typing import Any

import pytest

from components.capabilities import ClusterCapabilities, KueueCapabilities
from components.errors import InvalidJobArgs
from components.job.bundle import build_bundle
from components.job.fit import check_fits
from components.job.render import render_job
from tests.components.componenttest import PASSWORD, job_args, unsecret
from tests.components.job.test_job_component import COMPONENT_TYPE, run_job

pytestmark = pytest.mark.unit

TRAINJOB_TYPE = "kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob"


@pytest.mark.parametrize(("overrides", "field", "reason", "fix"), [
    ({"mode": "service"}, "backend", "a TrainJob's JobSet ends when its processes exit", 'backend="statefulset"'),
    ({"min_workers": 1, "max_workers": 2}, "min_workers", "torch plugin has no elastic support",
     'backend="pytorchjob"'),
    ({"workers": 3, "quorum_workers": 2, "min_workers": 2, "max_workers": 3, "gang_scheduler": "volcano"},
     "quorum_workers", "minMember = every pod (3)", 'backend="indexed-job"'),
    ({"workers": 3, "quorum_workers": 2, "gang_scheduler": "scheduler-plugins"},
     "quorum_workers", "scheduler-plugins has minMember = every pod", 'backend="indexed-job"'),
    ({"master_port": 29400}, "master_port", "PET_MASTER_PORT=29500", "set master_port=29500"),
    ({"scheduler_name": "my-scheduler"}, "scheduler_name", "schedulerName is the runtime's", 'backend="indexed-job"'),
    ({"service_account": "trainer"}, "service_account", "automountServiceAccountToken: false",
     'backend="indexed-job"'),
    ({"working_dir": "/workspace"}, "working_dir", "cannot set the node container's workingDir",
     'backend="indexed-job"'),
    ({"image_pull_policy": "Always"}, "image_pull_policy", "imagePullPolicy", 'backend="indexed-job"'),
    ({"ttl_seconds_after_finished": 60}, "ttl_seconds_after_finished", "a runtime patch cannot set the JobSet's",
     'backend="indexed-job"'),
    ({"gang_scheduler": "kueue", "queue": "team", "grace_period": 20}, "grace_period",
     "Kueue 0.19 drops a TrainJob's own grace period", 'backend="indexed-job"'),
])
def test_what_the_trainer_cannot_do_is_refused_with_the_reason_and_the_backend_that_can(
    overrides: dict[str, Any], field: str, reason: str, fix: str
) -> None:
    """kubeflow/trainer v2.3.0: the torch plugin's missing elastic support (``pkg/runtime/framework/plugins/torch/
    torch.go``), PodGroups of every pod (``coscheduling.go``, ``volcano.go``), ``constants.ContainerTrainerPort``,
    the fields a runtime patch may set (``manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml``,
    ``runtimePatches[].trainingRuntimeSpec.template.spec.replicatedJobs[].template.spec.template.spec``); Kueue
    v0.19.2's admission through the Trainer's v2.2.1 types, which drops a patch's grace period
    (``tests/cluster/live_kueue_trainjob.py`` shows it)."""
    with pytest.raises(InvalidJobArgs) as raised:
        job_args(backend="trainjob", **overrides)
    error = raised.value
    assert error.field == field
    assert reason in error.problem and fix in str(error)


def test_a_queued_trainjob_with_the_default_grace_period_and_an_unqueued_one_with_its_own_are_accepted() -> None:
    assert job_args(backend="trainjob", gang_scheduler="kueue", queue="team").grace_period == 5
    assert job_args(backend="trainjob", grace_period=20).grace_period == 20


def test_a_pet_variable_in_the_users_env_is_refused_as_the_trainers_webhook_would() -> None:
    """kubeflow/trainer v2.3.0 ``torch.go`` ``Validate``: ``trainer.env`` must not hold a
    ``TorchRunReservedEnvNames`` variable."""
    with pytest.raises(InvalidJobArgs, match=r"env\['PET_NNODES'\].*set by the Trainer's torch plugin"):
        job_args(backend="trainjob", env={"PET_NNODES": "4"})
    assert job_args(backend="indexed-job", env={"PET_NNODES": "4"}).env == {"PET_NNODES": "4"}


def test_the_component_registers_the_trainjob_after_its_secret_and_bundle_replaced_on_any_change() -> None:
    """Under Pulumi's mocks: the TrainJob as rendered, after the token Secret and the bundle its pods mount, with
    the CRD's add-on in its dependencies; no Service (JobSet's, kubernetes-sigs/jobset v0.12.0
    ``pkg/controllers/jobset_controller.go``); the coordinator under JobSet's pod name."""
    result = run_job(backend="trainjob", workers=2)
    children = result.children(result.one(COMPONENT_TYPE))
    rendered = render_job("demo", job_args(backend="trainjob", workers=2), PASSWORD, build_bundle())
    trainjob = result.one(TRAINJOB_TYPE)
    body = next(m.body for m in rendered.manifests if m.role == "trainjob")
    assert unsecret(trainjob.inputs) == body
    assert trainjob.replace_on_changes == ["*"] and trainjob.delete_before_replace
    assert result.outputs["addon"] in trainjob.dependencies
    assert {children["demo-token"].urn, children["demo-runtime"].urn} <= set(trainjob.dependencies)
    assert "kubernetes:core/v1:Service" not in {r.type for r in children.values()}
    assert result.outputs["coordinator_url"] == "http://demo-node-0-0.demo.default.svc.cluster.local:32300"
    assert result.outputs["service_fqdn"] == "demo.default.svc.cluster.local"


@pytest.mark.parametrize(("cluster", "overrides", "field", "problem"), [
    (ClusterCapabilities(), {}, "backend", "Kubeflow Trainer v2 is not installed"),
    (ClusterCapabilities(trainer_runtimes=("none",), volcano_queues=("default",)), {"gang_scheduler": "volcano"},
     "gang_scheduler", "no trainplane runtime 'trainplane-volcano'"),
    (ClusterCapabilities(trainer_runtimes=("none",), kueue=KueueCapabilities(frameworks=frozenset({"batch/job"}),
                                                                             local_queues={("default", "q"): "cq"})),
     {"gang_scheduler": "kueue", "queue": "q"}, "gang_scheduler", "trainer.kubeflow.org/trainjob integration is off"),
])
def test_a_cluster_without_the_trainer_its_runtime_or_kueues_integration_is_refused(
    cluster: ClusterCapabilities, overrides: dict[str, Any], field: str, problem: str
) -> None:
    """Kueue ignores a queue whose integration is off (kubernetes-sigs/kueue v0.19.2
    ``pkg/controller/jobframework/setup.go``; the TrainJob's is ``trainer.kubeflow.org/trainjob``,
    ``pkg/controller/jobs/trainjob/trainjob_controller.go``)."""
    with pytest.raises(InvalidJobArgs) as raised:
        check_fits(job_args(backend="trainjob", **overrides), cluster)
    assert raised.value.field == field and problem in str(raised.value)


def test_a_cluster_with_the_runtime_fits() -> None:
    cluster = ClusterCapabilities(trainer_runtimes=("none", "volcano"), volcano_queues=("default",))
    assert check_fits(job_args(backend="trainjob", gang_scheduler="volcano", queue="default"), cluster) is None
