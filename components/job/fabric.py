"""EFA for a job's pods: the device request, the huge pages libfabric uses, and the environment NCCL needs.

Sources, each value checked against them (AWS's EKS User Guide, awsdocs/amazon-eks-user-guide):

- ``latest/ug/ml/device-management-efa.adoc`` ("Install the EFA Kubernetes device plugin"): the device plugin
  advertises EFA devices as the extended resource ``vpc.amazonaws.com/efa``, requested in a container's
  requests and limits; "Each EFA device is exclusively allocated to one Pod". The EKS-optimized AL2023 AMIs
  carry the host components (the ``aws-efa-installer``) but not the plugin.
- ``latest/ug/ml/node-efa.adoc``: "Amazon EC2 instances with the EFA driver installed pre-allocate 5128 2MiB Huge
  Pages"; its NCCL test worker, which takes a whole ``p5.48xlarge``, requests ``vpc.amazonaws.com/efa: 32`` and
  ``hugepages-2Mi: 5120Mi`` in its manifest (the prose beside it says 5210Mi and four EFAs; the manifest is
  what runs); "You can assign up to one EFA per network card", so a pod that owns its node asks for one per
  network card; its plugin check shows a node (the ``p4d.24xlarge`` of the page's earlier version) with
  ``vpc.amazonaws.com/efa: 4``. The EC2 User Guide ("Maximize network bandwidth on accelerated computing
  instances with EFA") gives P5 and P5e up to 32 network cards.

NCCL reaches EFA through the aws-ofi-nccl plugin in the image (without it NCCL uses TCP sockets). Its "EFA
Cheatsheet" (aws/aws-ofi-nccl ``doc/efa-env-var.md``) says what the environment needs: ``FI_PROVIDER=efa``
(libfabric's provider filter) for aws-ofi-nccl 1.5.0 and older on EFA GPU instances, which trainplane sets: later
plugins pick the EFA provider themselves, so it changes nothing there. ``FI_EFA_USE_DEVICE_RDMA`` is not to be set
with libfabric 1.18 and aws-ofi-nccl 1.7.0 or later: libfabric then uses the device's RDMA read where it has it
(p4d, p5) and aborts when the variable asks for RDMA on a device without it ("FI_EFA_USE_DEVICE_RDMA=1 was set by
user, but EFA device has no rdma-read capability", ofiwg/libfabric ``prov/efa/src/rdm/efa_rdm_util.c``,
``efa_rdm_get_use_device_rdma``), as on g5; trainplane leaves it unset.
"""

from __future__ import annotations

from typing import Any

EFA_RESOURCE = "vpc.amazonaws.com/efa"
HUGEPAGES_RESOURCE = "hugepages-2Mi"
EFA_HUGEPAGES = "5120Mi"
"""Huge pages an EFA pod requests: what AWS's NCCL test worker requests, within the 5128 pages (10256 MiB) the EFA
driver pre-allocates."""
EFA_ENV = {"FI_PROVIDER": "efa"}
NODE_GROUP_LABEL = "trainplane.dev/node-group"
"""The label the EKS component puts on every node of a GPU node group (its name), which ``node_group`` selects."""
EFA_INTERFACES = {"p4d.24xlarge": 4, "p4de.24xlarge": 4, "p5.48xlarge": 32, "p5e.48xlarge": 32,
                  **{f"g5.{size}": 1 for size in ("8xlarge", "12xlarge", "16xlarge", "24xlarge", "48xlarge")}}
"""EFA interfaces of instance types, one per network card (``node-efa.adoc``: "You can assign up to one EFA per
network card"; a ``p4d.24xlarge`` node shows ``vpc.amazonaws.com/efa: 4``, a ``p5.48xlarge`` worker requests 32,
P5 and P5e have 32 network cards; the EFA-capable g5 sizes are those aws/eks-charts v0.5.30 lists in the device
plugin's ``supportedInstanceLabels``, each taken to have one network card: not checked against the EC2 User
Guide's network card table). For any other type the job's ``efa`` is taken as given, and its group cannot scale
from zero for EFA pods."""
EFA_NODE_HUGEPAGES = "10256Mi"
"""The 2 MiB huge pages an EFA node has: the 5128 pages the EFA driver pre-allocates (``node-efa.adoc``)."""


def efa_resources(efa: int) -> dict[str, str]:
    """The requests (= limits) of a pod with ``efa`` EFA interfaces: the devices and the huge pages."""
    return {EFA_RESOURCE: str(efa), HUGEPAGES_RESOURCE: EFA_HUGEPAGES} if efa > 0 else {}


def add_efa(container: dict[str, Any], efa: int) -> None:
    """Request ``efa`` interfaces and the huge pages in ``container``'s requests and limits (extended resources
    and huge pages must be equal in both), in place."""
    extra = efa_resources(efa)
    if not extra:
        return
    resources = container.setdefault("resources", {})
    for part in ("requests", "limits"):
        resources[part] = {**resources.get(part, {}), **extra}
