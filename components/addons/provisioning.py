"""Atomic scale-up of a whole gang: Kueue's ProvisioningRequest admission check, for the Kueue add-on's
``atomic_scale_up``.

How it works (kubernetes-sigs/kueue v0.19.2, the release the add-on pins; kubernetes/autoscaler tag
cluster-autoscaler-chart-9.59.0, the chart the EKS cluster pins):

- A ClusterQueue lists the AdmissionCheck :data:`CHECK_NAME` in ``spec.admissionChecksStrategy.admissionChecks``
  (v1beta2 has no plain ``admissionChecks`` list: ``apis/kueue/v1beta2/clusterqueue_types.go``,
  ``AdmissionChecksStrategy``; an empty ``onFlavors`` runs it for every workload of the queue).
- Once a workload has its quota, the check's controller ``kueue.x-k8s.io/provisioning-request``
  (``apis/kueue/v1beta2/provisioningrequestconfig_types.go``, ``ProvisioningRequestControllerName``) creates a
  ProvisioningRequest (``autoscaling.x-k8s.io/v1``) with PodTemplates of the workload's pod sets, of the class the
  ProvisioningRequestConfig named by the check's ``parameters`` gives. Only pod sets requesting a
  ``managedResources`` resource go in; a workload with none passes the check at once.
- The Cluster Autoscaler, started with ``--enable-provisioning-requests``, handles class
  ``best-effort-atomic-scale-up.autoscaling.x-k8s.io`` (``apis/provisioningrequest/autoscaling.x-k8s.io/v1/
  types.go``, ``ProvisioningClassBestEffortAtomicScaleUp``) by one scale-up of all the request's pods or none
  (``provisioningrequest/besteffortatomic/provisioning_class.go``: ``ScaleUp(..., allOrNothing=true)``; the
  orchestrator gives up on a node group that cannot take every pod, ``core/scaleup/orchestrator/
  orchestrator.go``). It then sets ``Provisioned``, Kueue passes the check and admits the workload, whose pods
  carry ``autoscaling.x-k8s.io/consume-provisioning-request`` and land on the booked nodes (booked for 10 minutes,
  ``processors/provreq/processor.go``, ``defaultReservationTime``). ``Provisioned=False`` (``CapacityIsNotFound``)
  keeps the check ``Pending`` (``pkg/controller/admissionchecks/provisioning/controller.go``, ``isAccepted``):
  the workload keeps its quota reservation and waits while the autoscaler tries again (back-off from
  ``--provisioning-request-initial-backoff-time``, 1 min, to ``--provisioning-request-max-backoff-time``, 10 min);
  a request still unprovisioned after 7 days is marked ``Failed`` (``defaultExpirationTime``), and a ``Failed``
  or expired booking is retried by Kueue per the config's ``retryStrategy`` (default: 3 times, 60 s doubling to
  1800 s) and then rejected, which deactivates the workload.
- "Best effort": on AWS the request to EC2 is not atomic. ``AwsNodeGroup.AtomicIncreaseSize`` returns
  ``ErrNotImplemented`` (``cloudprovider/aws/aws_cloud_provider.go``) and the executor falls back to
  ``IncreaseSize`` (``core/scaleup/orchestrator/executor.go``). A gang that does not fit a group's ``max_size``
  gets no nodes at all; a shortfall of EC2 capacity after the request can still leave part of them, which
  ``waitForPodsReady`` then evicts and requeues, and scale-down removes.

Kueue sets its provisioning controller up only if the ProvisioningRequest API is served when the manager starts
(``cmd/kueue/main.go``: "Skipping provisioning controller setup: Provisioning Requests not supported";
``pkg/controller/admissionchecks/provisioning/indexer.go``, ``ServerSupportsProvisioningRequest``); without it
the AdmissionCheck never turns ``Active`` and its ClusterQueues stay inactive (reason
``AdmissionCheckInactive``). The CRD must exist first (the EKS cluster's ``provisioning_requests``), and the
manager must start after it: the add-on names the eviction clean-up gate in the manager config
(:data:`FEATURE_GATES`), which changes the config's checksum in the manager's pod template
(``charts/kueue/templates/manager/manager.yaml``, ``charts.kueue.x-k8s.io/config-checksum``), so turning
``atomic_scale_up`` on restarts the manager. The ``ProvisioningACC`` gate of earlier releases is gone: GA and
locked on in v0.14, removed in v0.15 (``pkg/features/kube_features.go``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pulumi

from components.addons.objects import custom_resource
from components.addons.versions import KUEUE_API
from runtime.agent.contract import GPU_RESOURCE

CHECK_NAME = "trainplane-atomic-scale-up"
"""The name of the AdmissionCheck and of the ProvisioningRequestConfig it points to."""
CONTROLLER_NAME = "kueue.x-k8s.io/provisioning-request"
"""The controller of Kueue's ProvisioningRequest admission check (``ProvisioningRequestControllerName``)."""
ATOMIC_SCALE_UP_CLASS = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
"""The Cluster Autoscaler's all-or-nothing provisioning class (FAQ "How can I use ProvisioningRequest to run batch
workloads", "Supported ProvisioningClasses"; from Cluster Autoscaler 1.30.2, the chart's app is 1.35.0)."""
MANAGED_RESOURCES = (GPU_RESOURCE,)
"""The resources the autoscaler provisions for (``managedResources``): GPU pod sets go into the request; a
workload of CPU pods only, which runs on the fixed-size system group, passes the check without one."""
FEATURE_GATES = {"CleanupProvisioningRequestsOnEviction": True}
"""Kueue v0.19's gate deleting an evicted workload's ProvisioningRequests (Beta, on by default:
``pkg/features/kube_features.go``; ``pkg/controller/admissionchecks/provisioning/controller.go``), named so that a
workload evicted by ``waitForPodsReady`` gives up its booking; set through the config's ``featureGates`` (the
chart passes no ``--feature-gates`` while its ``controllerManager.featureGates`` is empty, which the config's
``featureGates`` cannot be combined with: ``apis/config/v1beta2/configuration_types.go``)."""


def provisioning_request_config() -> dict[str, Any]:
    """Render the ProvisioningRequestConfig: class :data:`ATOMIC_SCALE_UP_CLASS` for :data:`MANAGED_RESOURCES`."""
    return {
        "apiVersion": KUEUE_API,
        "kind": "ProvisioningRequestConfig",
        "metadata": {"name": CHECK_NAME},
        "spec": {"provisioningClassName": ATOMIC_SCALE_UP_CLASS, "managedResources": list(MANAGED_RESOURCES)},
    }


def admission_check() -> dict[str, Any]:
    """Render the AdmissionCheck run by :data:`CONTROLLER_NAME`, its ``parameters`` the ProvisioningRequestConfig
    (the controller refuses another group or kind: ``pkg/util/admissioncheck/admissioncheck.go``, ``refValidForGK``)."""
    return {
        "apiVersion": KUEUE_API,
        "kind": "AdmissionCheck",
        "metadata": {"name": CHECK_NAME},
        "spec": {
            "controllerName": CONTROLLER_NAME,
            "parameters": {"apiGroup": KUEUE_API.split("/")[0], "kind": "ProvisioningRequestConfig",
                           "name": CHECK_NAME},
        },
    }


def with_admission_check(queue: dict[str, Any]) -> dict[str, Any]:
    """A rendered ClusterQueue that runs the check for every workload (no ``onFlavors``)."""
    spec = {**queue["spec"], "admissionChecksStrategy": {"admissionChecks": [{"name": CHECK_NAME}]}}
    return {**queue, "spec": spec}


def install_admission_check(name: str, parent: pulumi.Resource,
                            depends_on: Sequence[pulumi.Resource]) -> pulumi.Resource:
    """The ProvisioningRequestConfig, then the AdmissionCheck naming it; returns the check (ClusterQueues come
    after it)."""
    config = custom_resource(f"{name}-provisioningrequestconfig", provisioning_request_config(), parent=parent,
                             depends_on=depends_on)
    return custom_resource(f"{name}-admissioncheck", admission_check(), parent=parent,
                           depends_on=[*depends_on, config])
