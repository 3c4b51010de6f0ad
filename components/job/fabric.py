"""EFA for a job's pods: the device request, the huge pages libfabric uses, and the environment NCCL needs.

Sources (AWS's own documentation, awsdocs/amazon-eks-user-guide):

- ``latest/ug/ml/device-management-efa.adoc`` ("Install the EFA Kubernetes device plugin"): the device plugin
  advertises EFA devices as the extended resource ``vpc.amazonaws.com/efa``, requested in a container's
  requests and limits; each device is given to one pod only. The EKS AL2023 accelerated AMIs carry the
  host components (the ``aws-efa-installer``) but not the plugin.
- ``latest/ug/ml/node-efa.adoc``: instances with the EFA driver pre-allocate 5128 huge pages of 2 MiB, and a
  worker that takes a whole ``p5.48xlarge`` requests ``vpc.amazonaws.com/efa: 32`` and ``hugepages-2Mi:
  5120Mi`` (its NCCL test job); "you can assign up to one EFA per network card", so a pod that owns its node
  asks for one per network card.

``FI_PROVIDER=efa`` selects libfabric's EFA provider for the aws-ofi-nccl plugin, NCCL's network plugin on
AWS ("Users can specify to use a preferred libfabric provider with ``FI_PROVIDER``": aws/aws-ofi-nccl wiki,
"Environment Variables"); without the plugin in the image NCCL uses TCP sockets. ``FI_EFA_USE_DEVICE_RDMA``
is left to the image: it is right on p4d/p5 and aborts on instances whose EFA has no RDMA read (g5).
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
network card"; a ``p4d.24xlarge`` node shows ``vpc.amazonaws.com/efa: 4``, a ``p5.48xlarge`` worker requests 32;
the EFA-capable g5 sizes, as aws/eks-charts' device plugin lists them, have one network card). For any other
type the job's ``efa`` is taken as given, and its group cannot scale from zero for EFA pods."""
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
