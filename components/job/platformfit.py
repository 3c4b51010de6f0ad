"""Whether a cluster can give a job its platform fields: the node group it names, EFA on it, and the
StorageClasses of the claims it creates. Pure checks of ``DistributedJobArgs`` against ``ClusterCapabilities``,
run by ``components.job.fit.check_fits`` at preview; a part the cluster does not describe (``None``) is not
checked."""

from __future__ import annotations

from components.capabilities import ClusterCapabilities
from components.errors import InvalidJobArgs
from components.job.args import DistributedJobArgs
from components.job.fabric import EFA_INTERFACES
from components.job.volumes import RWX


def check_platform_fits(a: DistributedJobArgs, cluster: ClusterCapabilities) -> None:
    """Refuse a node group, EFA or a claim the cluster cannot give the job.

    Raises:
        InvalidJobArgs: an unknown ``node_group``; ``efa`` on no group or on a group without EFA, or fewer or more
            interfaces than the group's instances have (AWS's EKS guide, ``components.job.fabric``); a claim's
            StorageClass the cluster does not offer, or an access mode it does not support.
    """
    _check_node_group(a, cluster)
    _check_claims(a, cluster)


def _check_node_group(a: DistributedJobArgs, cluster: ClusterCapabilities) -> None:
    groups = cluster.node_groups
    if groups is None:
        return
    names = ", ".join(sorted(groups)) or "none"
    if a.node_group is not None and a.node_group not in groups:
        raise InvalidJobArgs("node_group", a.node_group, f"the cluster has no such GPU node group ({names})",
                             "name one of trainplane:gpuNodeGroups")
    if a.efa <= 0:
        return
    efa_groups = sorted(name for name, g in groups.items() if g.efa) or ["none"]
    if a.node_group is None:
        raise InvalidJobArgs("efa", a.efa, "an EFA job must run on a group with EFA, and names none",
                             f"set node_group to an EFA group ({', '.join(efa_groups)})")
    group = groups[a.node_group]
    if not group.efa:
        raise InvalidJobArgs("efa", a.efa, f"node group {group.name!r} has no EFA interfaces, so no node advertises "
                             "vpc.amazonaws.com/efa and the pods would stay Pending",
                             f"set efa: true on the group, use an EFA group ({', '.join(efa_groups)}), or efa 0")
    counts = {EFA_INTERFACES[t] for t in group.instance_types if t in EFA_INTERFACES}
    if counts and a.efa not in counts:
        raise InvalidJobArgs("efa", a.efa, f"the instances of node group {group.name!r} "
                             f"({', '.join(group.instance_types)}) have {sorted(counts)} EFA interfaces; a pod that "
                             "owns its node takes them all", f"set efa to {max(counts)}")


def _check_claims(a: DistributedJobArgs, cluster: ClusterCapabilities) -> None:
    offered = cluster.storage_classes
    if offered is None:
        return
    for i, claim in enumerate(a.claims):
        name = claim["spec"].get("storageClassName", cluster.default_storage_class)
        field = f"claims[{i}].spec.storageClassName"
        if name is None:
            raise InvalidJobArgs(field, None, "the cluster has no default StorageClass",
                                 f"name one of {sorted(offered) or 'none (install storage)'}")
        if name not in offered:
            raise InvalidJobArgs(field, name, f"the cluster offers no such StorageClass ({sorted(offered)})",
                                 "name one it offers, or install it (trainplane:eksStorage on EKS)")
        missing = sorted(set(claim["spec"]["accessModes"]) - set(offered[name]))
        if missing:
            shared = sorted(n for n, modes in offered.items() if RWX in modes)
            fix = (f"use a ReadWriteMany class ({', '.join(shared)}) for a claim every pod mounts" if shared else
                   "the cluster offers no ReadWriteMany class: make the shared claim outside the stack (e.g. on "
                   "NFS) and name it in checkpoint_claim or a persistentVolumeClaim volume, not in claims")
            raise InvalidJobArgs(f"claims[{i}].spec.accessModes", list(claim["spec"]["accessModes"]),
                                 f"StorageClass {name!r} supports {list(offered[name])}, not {missing}", fix)
