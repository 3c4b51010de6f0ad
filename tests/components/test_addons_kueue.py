"""Kueue's manager config against the pinned release's rules: a running job that lost a pod is left to its agents,
and only integrations Kueue knows are configured."""

from __future__ import annotations

import pytest

from components.addons import Kueue, KueueArgs
from components.addons.kueue import KNOWN_FRAMEWORKS
from components.errors import ArgumentError
from tests.components.test_addons_components import KUEUE_CHART_FRAMEWORKS, deploy_addon, kueue_manager_config

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("given", "rendered"), [({}, "0s"), ({"pods_recovery_timeout": 900}, "900s")])
def test_kueue_leaves_a_running_job_that_lost_a_pod_to_its_agents(given, rendered):
    """kubernetes-sigs/kueue v0.19.2 ``apis/config/v1beta2/defaults.go``: an unset ``recoveryTimeout`` becomes
    ``timeout``; ``pkg/controller/core/workload_controller.go`` (``admittedNotReadyWorkload``) evicts a running
    workload whose ``PodsReady`` turned false (reason ``WaitForRecovery``: a pod failed, its replacement not ready)
    once that much time passed, requeueing the whole job; ``pkg/controller/core/core.go`` keeps only a duration
    above 0, so ``"0s"`` turns the check off. An elastic job goes on without the pod, so by default it is off."""
    deployment = deploy_addon(lambda opts: Kueue("queues", KueueArgs(pods_ready_timeout=420, **given), opts=opts))

    assert kueue_manager_config(deployment)["waitForPodsReady"]["recoveryTimeout"] == rendered


def test_kueue_knows_the_integrations_of_the_pinned_release():
    """kubernetes-sigs/kueue v0.19.2 registers one integration per package linked by ``pkg/controller/jobs/jobs.go``
    and ``pkg/controller/jobs/kubeflow/jobs/jobs.go``, each under its ``FrameworkName``; the chart's list (some
    commented out in ``charts/kueue/values.yaml``) is among them."""
    assert KNOWN_FRAMEWORKS == (
        "batch/job", "deployment", "jobset.x-k8s.io/jobset", "kubeflow.org/jaxjob", "kubeflow.org/mpijob",
        "kubeflow.org/paddlejob", "kubeflow.org/pytorchjob", "kubeflow.org/tfjob", "kubeflow.org/xgboostjob",
        "leaderworkerset.x-k8s.io/leaderworkerset", "pod", "ray.io/raycluster", "ray.io/rayjob", "ray.io/rayservice",
        "sparkoperator.k8s.io/sparkapplication", "statefulset", "trainer.kubeflow.org/trainjob",
        "workload.codeflare.dev/appwrapper",
    )
    assert list(KNOWN_FRAMEWORKS) == sorted(KNOWN_FRAMEWORKS), "sorted, as Kueue lists them in its error"
    assert set(KUEUE_CHART_FRAMEWORKS) < set(KNOWN_FRAMEWORKS)


def test_a_misspelt_kueue_framework_is_refused_at_preview_naming_the_known_ones():
    """kubernetes-sigs/kueue v0.19.2 ``pkg/config/validation.go`` (``validateIntegrations``) refuses a framework it
    does not know, and the manager does not start; its chart's webhooks (``failurePolicy: Fail``) would then refuse
    every workload they cover. The add-on refuses it first, from a program in any language (a mapping)."""
    with pytest.raises(ArgumentError) as info:
        deploy_addon(lambda opts: Kueue("queues", {"frameworks": ["batch/job", "kubeflow.org/pytorchjobs"]}, opts=opts))

    assert info.value.field == "frameworks[1]"
    assert info.value.value == "kubeflow.org/pytorchjobs"
    listed = ", ".join(KNOWN_FRAMEWORKS)
    assert (info.value.problem, info.value.fix) == (f"must be one of {listed}", f"use one of {listed}")
