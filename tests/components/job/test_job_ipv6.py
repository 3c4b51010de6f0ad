"""DistributedJob on an IPv6 cluster: the rendered Indexed Job's pods, run with the real agent on two
hosts that have IPv6 addresses only (network namespaces, ``tests.netns``), do a gloo all-reduce.

The kubelet's part is filled in as on an IPv6 cluster: ``status.podIP`` is the pod's IPv6 address,
and the pods' names under the headless Service resolve to AAAA records only (no
``TRAINPLANE_RESOLVE``: the agent's real resolver reads them). ``GLOO_SOCKET_IFNAME`` names each
host's interface, as a user sets it where the host name does not resolve to the pod's address.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from components import DistributedJob
from runtime.agent import contract
from tests.components.componenttest import deploy, job_args, unsecret
from tests.components.job.test_job_contract import JOB, NAMESPACE, RUN_TIMEOUT, kubelet_env
from tests.netns import ADDRESSES, ipv6_pair
from tests.runtime.test_ipv6 import ALL_REDUCE, finish, run_in

pytestmark = pytest.mark.process


def render(tmp_path: Path, **overrides: Any) -> dict[str, dict[str, Any]]:
    """The job's objects by kind, as the engine received them (secrets unwrapped)."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "allreduce.py").write_text(ALL_REDUCE)
    args = job_args(script="allreduce.py", args=[str(tmp_path / "out")], workers=2, num_proc=2, namespace=NAMESPACE,
                    working_dir=str(workspace), quorum_timeout=60, env={"OMP_NUM_THREADS": "1"}, **overrides)
    result = deploy(lambda: {"name": DistributedJob(JOB, args).job_name})
    return {r.inputs["kind"]: unsecret(r.inputs) for r in result.registrations.values() if "kind" in r.inputs}


def test_the_headless_service_publishes_both_families():
    """Kubernetes gives a headless Service with a selector ``ipFamilyPolicy: SingleStack`` and the
    first service range's family unless told otherwise (kubernetes/website,
    content/en/docs/concepts/services-networking/dual-stack.md, "Dual-stack defaults"), and its DNS
    answers in that family only; ``PreferDualStack`` gives pods A and AAAA records on a dual-stack
    cluster and falls back to single-stack elsewhere, so an agent resolving either family finds its
    peers (the agents listen on both)."""
    service = next(r.inputs for r in deploy(lambda: {"name": DistributedJob(JOB, job_args()).job_name})
                   .registrations.values() if r.inputs.get("kind") == "Service")
    assert service["spec"]["ipFamilyPolicy"] == "PreferDualStack"


@pytest.mark.timeout(RUN_TIMEOUT + 60)
def test_rendered_pods_run_a_gloo_job_on_an_ipv6_only_network(tmp_path: Path):
    objects = render(tmp_path)
    (tmp_path / "out").mkdir()
    job = objects["Job"]
    pod = job["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    name = job["metadata"]["name"]
    dns = {f"{name}-{i}.{pod['spec']['subdomain']}": addr for i, addr in enumerate(ADDRESSES)}
    with ipv6_pair(dns) as hosts:
        procs = []
        for index, ((namespace, link), addr) in enumerate(zip(hosts, ADDRESSES)):
            env = kubelet_env(objects, pod, container, f"{name}-{index}-x7k2p", addr, tmp_path / "pods")
            env.update({contract.JOB_COMPLETION_INDEX: str(index), "HOSTNAME": f"{name}-{index}",
                        "GLOO_SOCKET_IFNAME": link})
            procs.append(run_in(namespace, container["command"], env, cwd=Path(container["workingDir"])))
        codes, output = finish(procs, RUN_TIMEOUT)
    assert codes == [0, 0], output
    ranks = [json.loads(p.read_text()) for p in sorted((tmp_path / "out").glob("rank-*.json"))]
    assert [r["sum"] for r in ranks] == [10.0] * 4
    assert {r["POD_IPS"] for r in ranks} == {",".join(ADDRESSES)}
    assert {r["JAX_COORDINATOR_ADDRESS"].rpartition(":")[0] for r in ranks} == {f"[{ADDRESSES[0]}]"}
