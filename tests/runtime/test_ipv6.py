"""A real job on IPv6 addresses: two agents in two network namespaces joined by a veth pair.

Node 0 lives at fd00::2, node 1 at fd00::3, with no IPv4 between them. Node 1 finds the coordinator
by a host name that has only an AAAA record, as on an IPv6-only cluster's headless Service; node 0
is given it as a bracketed ``[fd00::2]:port``. Both agents bind every interface (dual-stack). The
ranks do a gloo all-reduce over IPv6 and write the addresses they got.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Mapping, Sequence

import pytest

from runtime.agent import contract
from tests.conftest import ROOT, project_env
from tests.netns import ADDRESSES, ipv6_pair

pytestmark = pytest.mark.process

COORDINATOR_NAME = "h12-coordinator-v6"
AGENT_PORT = 32300
ALL_REDUCE = """
import json, os, sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
value = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(value)
keys = ("MASTER_ADDR", "JAX_COORDINATOR_ADDRESS", "TF_CONFIG", "POD_IPS")
with open(os.path.join(sys.argv[1], f"rank-{dist.get_rank()}.json"), "w") as f:
    json.dump({"sum": value.item(), **{k: os.environ[k] for k in keys}}, f)
dist.destroy_process_group()
"""


def run_in(namespace: str, argv: Sequence[str], env: Mapping[str, str], cwd: Path = ROOT) -> subprocess.Popen[str]:
    """Start ``argv`` on the host that is ``namespace``."""
    return subprocess.Popen(["ip", "netns", "exec", namespace, *argv], cwd=cwd, env=dict(env),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(procs: Sequence[subprocess.Popen[str]], timeout: float = 180) -> tuple[list[int], str]:
    """Wait for every process: their exit codes and their output together."""
    outputs = [proc.communicate(timeout=timeout)[0] for proc in procs]
    return [proc.returncode for proc in procs], "\n".join(outputs)


def test_a_gloo_job_runs_on_ipv6_addresses_in_two_namespaces(tmp_path: Path):
    out = tmp_path / "out"
    out.mkdir()
    script = tmp_path / "allreduce.py"
    script.write_text(ALL_REDUCE)
    common = {
        contract.JOB_NAME: "v6", contract.TOKEN: uuid.uuid4().hex, contract.WORKERS: "2", contract.NUM_PROC: "2",
        contract.ENTRYPOINT: json.dumps([str(script), str(out)]), contract.AGENT_PORT_SETTING: str(AGENT_PORT),
        contract.MASTER_PORT: "29500", contract.GRACE_PERIOD: "2", contract.QUORUM_TIMEOUT: "60",
    }
    coordinators = (f"[{ADDRESSES[0]}]:{AGENT_PORT}", f"{COORDINATOR_NAME}:{AGENT_PORT}")
    with ipv6_pair({COORDINATOR_NAME: ADDRESSES[0]}) as hosts:
        codes, output = finish([
            run_in(namespace, [sys.executable, "-m", contract.AGENT_MODULE], project_env(**common, **{
                contract.NODE_RANK_SETTING: str(node), contract.COORDINATOR_HOST: coordinator,
                contract.ADVERTISE_ADDRESS: addr, "GLOO_SOCKET_IFNAME": link}))
            for node, ((namespace, link), addr, coordinator) in enumerate(zip(hosts, ADDRESSES, coordinators))
        ])
    assert codes == [0, 0], output
    ranks = {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in out.glob("rank-*.json")}
    assert sorted(ranks) == [0, 1, 2, 3]
    for env in ranks.values():
        assert env["sum"] == 10.0
        assert env["MASTER_ADDR"] == "fd00::2", "torch takes MASTER_ADDR bare"
        assert env["JAX_COORDINATOR_ADDRESS"] == "[fd00::2]:29532"
        assert env["POD_IPS"] == "fd00::2,fd00::3"
        assert json.loads(env["TF_CONFIG"])["cluster"]["worker"] == [
            "[fd00::2]:29564", "[fd00::2]:29565", "[fd00::3]:29564", "[fd00::3]:29565"]
