"""The job's network objects: headless Service, NetworkPolicy, and (service mode) PodDisruptionBudget."""

from __future__ import annotations

from typing import Any, Optional

from components.job.args import DistributedJobArgs
from components.job.naming import JobNames
from components.job.pod import pod_selector
from components.outputs import Labels, lift, merged
from runtime.agent import contract
from runtime.agent.spec.ports import framework_ports


def headless_service(names: JobNames, args: DistributedJobArgs, labels: Labels) -> dict[str, Any]:
    """A headless Service over the job's pods, publishing not-ready addresses.

    Pods register with the coordinator before any readiness probe passes, so their DNS records
    must exist from the start (``publishNotReadyAddresses: true``). Its ports: the agent's, the
    rendezvous port and, for ``ray``/``monarch``, the framework's (Ray's head and client server,
    Monarch's worker port).

    ``ipFamilyPolicy: PreferDualStack``: left unset, Kubernetes gives a headless Service with a
    selector ``SingleStack`` in the first service range's family ("existing headless Services with
    selectors are configured by the control plane to set .spec.ipFamilyPolicy to SingleStack and set
    .spec.ipFamilies to the address family of the first service cluster IP range", kubernetes/website
    ``content/en/docs/concepts/services-networking/dual-stack.md``), so its pods' names resolve in
    that family only; ``PreferDualStack`` "falls back to single-stack behavior" where dual-stack is
    not enabled. The agents listen on both families and resolve either (``runtime.agent.net``).
    """
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": names.service, "namespace": names.namespace, "labels": merged(labels)},
        "spec": {
            "clusterIP": "None",
            "ipFamilyPolicy": "PreferDualStack",
            "publishNotReadyAddresses": True,
            "selector": pod_selector(names),
            "ports": [
                {"name": contract.AGENT_PORT_NAME, "port": args.agent_port,
                 "targetPort": args.agent_port, "protocol": "TCP"},
                {"name": contract.MASTER_PORT_NAME, "port": args.master_port,
                 "targetPort": args.master_port, "protocol": "TCP"},
                *({"name": name, "port": port, "targetPort": port, "protocol": "TCP"}
                  for name, port in framework_ports(args.distribution, args.master_port)),
            ],
        },
    }


def network_policy(names: JobNames, args: DistributedJobArgs, labels: Labels) -> dict[str, Any]:
    """Ingress to the job's pods from the job's own pods only, plus ``allow_from`` on the agent port.

    The job's pods reach each other on every port: collective backends (NCCL, Gloo) open data
    connections on ephemeral ports beyond the rendezvous port, and Ray's raylets, object managers
    and workers listen on ports of their own choosing. Ray's and Monarch's ports take no token, so
    ``allow_from`` peers reach the (token-checked) agent port only. Egress is not restricted.
    """
    own = {"from": [{"podSelector": {"matchLabels": pod_selector(names)}}]}

    def rules(peers: tuple[Any, ...]) -> list[dict[str, Any]]:
        # No rule for no peers: a rule whose "from" is empty admits every source.
        extra = {"from": [dict(peer) for peer in peers], "ports": [{"port": args.agent_port, "protocol": "TCP"}]}
        return [own, extra] if peers else [own]

    ingress = lift(rules, args.allow_from)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": names.job, "namespace": names.namespace, "labels": merged(labels)},
        "spec": {
            "podSelector": {"matchLabels": pod_selector(names)},
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }


def disruption_budget(
    names: JobNames, args: DistributedJobArgs, labels: Labels
) -> Optional[dict[str, Any]]:
    """In service mode, a PodDisruptionBudget keeping the quorum up through voluntary disruptions (evictions,
    ``kubectl drain``, node-group upgrades), yet never blocking them: one pod at a time is always evictable.

    ``minAvailable`` is the quorum, but at most ``workers - 1``: a fixed-size job's quorum is every worker, and
    ``minAvailable == replicas`` would refuse every eviction, so no node running one of its pods could be
    drained while the job runs (an eviction is allowed only if ``minAvailable`` pods stay available without
    the evicted one, k8s.io/api v0.34.4 ``policy/v1/types.go``, ``PodDisruptionBudgetSpec``). The
    StatefulSet recreates an evicted pod and its agent rejoins the world. ``unhealthyPodEvictionPolicy:
    AlwaysAllow``: a pod that is running but not Ready (its agent's health check failing) serves nothing,
    and under the default ``IfHealthyBudget`` it could be evicted only while the budget holds, so one bad pod
    would block a drain too (the same file, ``UnhealthyPodEvictionPolicyType``).
    """
    if args.mode != "service":
        return None
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": names.job, "namespace": names.namespace, "labels": merged(labels)},
        "spec": {"minAvailable": min(args.quorum, args.workers - 1), "unhealthyPodEvictionPolicy": "AlwaysAllow",
                 "selector": {"matchLabels": pod_selector(names)}},
    }
