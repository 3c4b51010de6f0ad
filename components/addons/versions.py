"""Pinned versions of everything the add-ons install, with where each pin comes from, and the API
versions and scheduler names those releases serve (the job components render objects for them too).

The CRD files under ``../shared/schemas/`` that the tests validate against come from the same
releases (Volcano v1.15.1, Kueue v0.19.2, Kubeflow Training Operator v1.9.4).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class HelmChart:
    """A pinned Helm chart.

    Attributes:
        chart: Chart name in ``repository``, or a full ``oci://`` reference when ``repository`` is None.
        version: Exact chart version.
        repository: Classic Helm repository URL, or None for OCI charts.
    """

    chart: str
    version: str
    repository: Optional[str] = None

    @property
    def name(self) -> str:
        """The chart's own name (its ``Chart.yaml`` ``name``): the last part of ``chart``."""
        return self.chart.rsplit("/", 1)[-1]


NVIDIA_DEVICE_PLUGIN = HelmChart(
    "nvidia-device-plugin", "0.19.0", "https://nvidia.github.io/k8s-device-plugin"
)
"""NVIDIA k8s-device-plugin v0.19.0 (github.com/NVIDIA/k8s-device-plugin, CHANGELOG "v0.19.0")."""

VOLCANO = HelmChart("volcano", "1.15.1", "https://volcano-sh.github.io/helm-charts")
"""Volcano v1.15.1 (github.com/volcano-sh/volcano tag v1.15.1; chart from volcano-sh/helm-charts)."""
VOLCANO_API = "scheduling.volcano.sh/v1beta1"
"""API version of Volcano's Queue and PodGroup."""
VOLCANO_SCHEDULER = "volcano"
"""The scheduler name Volcano registers: pods' ``schedulerName`` and the operator's ``--gang-scheduler-name``."""

SCHEDULER_PLUGINS_SCHEDULER = "scheduler-plugins-scheduler"
"""The scheduler name scheduler-plugins' second-scheduler chart registers (trainplane does not install it)."""

KUEUE = HelmChart("oci://registry.k8s.io/kueue/charts/kueue", "0.19.2")
"""Kueue v0.19.2 (github.com/kubernetes-sigs/kueue tag v0.19.2; chart published to registry.k8s.io)."""
KUEUE_API = "kueue.x-k8s.io/v1beta2"
"""Kueue's storage version since v0.16 (served since v0.15; v1beta1 is still served, deprecated)."""

TRAINING_OPERATOR_VERSION = "v1.9.4"
"""Newest Kubeflow Training Operator v1 tag (github.com/kubeflow/trainer, formerly training-operator)."""

TRAINING_OPERATOR_MANIFESTS = (
    f"https://github.com/kubeflow/trainer//manifests/overlays/standalone?ref={TRAINING_OPERATOR_VERSION}"
)
"""The standalone kustomize overlay of that tag (namespace ``kubeflow``), as a kustomize remote target."""
TRAINING_OPERATOR_IMAGE = ("ghcr.io/kubeflow/training-v1/training-operator", "v1-93c5489")
"""The operator image and tag that overlay sets (kubeflow/trainer v1.9.4
``manifests/overlays/standalone/kustomization.yaml``, ``images``): how a local copy of the overlay shows its release."""

CLUSTER_AUTOSCALER = HelmChart("cluster-autoscaler", "9.59.0", "https://kubernetes.github.io/autoscaler")
"""Kubernetes Cluster Autoscaler chart 9.59.0, app v1.35.0 (github.com/kubernetes/autoscaler tag
cluster-autoscaler-chart-9.59.0, ``cluster-autoscaler/charts/cluster-autoscaler/Chart.yaml``)."""

AWS_EFA_DEVICE_PLUGIN = HelmChart("aws-efa-k8s-device-plugin", "v0.5.30", "https://aws.github.io/eks-charts")
"""AWS EFA Kubernetes device plugin chart v0.5.30, image v0.5.20 (github.com/aws/eks-charts
``stable/aws-efa-k8s-device-plugin/Chart.yaml``; the repository the EKS User Guide installs it from,
``latest/ug/ml/device-management-efa.adoc``)."""

AWS_FSX_CSI_DRIVER = HelmChart("aws-fsx-csi-driver", "1.17.0", "https://kubernetes-sigs.github.io/aws-fsx-csi-driver")
"""FSx for Lustre CSI driver chart 1.17.0, driver v1.9.0 (github.com/kubernetes-sigs/aws-fsx-csi-driver tag
helm-chart-aws-fsx-csi-driver-1.17.0)."""
TRAINER = HelmChart("oci://ghcr.io/kubeflow/charts/kubeflow-trainer", "2.3.0")
"""Kubeflow Trainer v2.3.0 (github.com/kubeflow/trainer tag v2.3.0, ``charts/kubeflow-trainer``): its chart
installs the ``trainer.kubeflow.org`` CRDs as templates (``crds.enabled``) and JobSet v0.12.0 as a dependency
(``Chart.yaml``: ``jobset`` 0.12.0 from ``oci://registry.k8s.io/jobset/charts``, condition ``jobset.install``)."""
TRAINER_API = "trainer.kubeflow.org/v1alpha1"
"""API version of the Trainer's TrainJob, TrainingRuntime and ClusterTrainingRuntime at v2.3.0."""
JOBSET_VERSION = "v0.12.0"
"""The JobSet release the Trainer's chart installs (github.com/kubernetes-sigs/jobset tag v0.12.0)."""
