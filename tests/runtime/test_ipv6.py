"""A real job on IPv6 addresses: two agents in two network namespaces joined by a veth pair.

Node 0 lives at fd00::2, node 1 at fd00::3, with no IPv4 between them. Node 1 finds the coordinator
by a host name that has only an AAAA record (the namespace's /etc/hosts, as ``ip netns exec`` mounts
it from /etc/netns/NAME/), as on an IPv6-only cluster's headless Service; node 0 is given it as a
bracketed ``[fd00::2]:port``. Both agents bind every interface (dual-stack). The ranks do a gloo
all-reduce over IPv6 and write the addresses they got.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from runtime.agent import contract
from tests.conftest import ROOT, project_env

ADDRESSES = ("fd00::2", "fd00::3")
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


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@pytest.fixture
def namespaces() -> Iterator[list[tuple[str, str]]]:
    """Two fresh namespaces (names prefixed h12) joined by a veth pair, fd00::2/64 and fd00::3/64,
    loopback up; the coordinator's name resolves, AAAA only, in both. Yields (namespace, link) pairs."""
    tag = uuid.uuid4().hex[:6]
    names = (f"h12v{tag}a", f"h12v{tag}b")
    links = (f"h12{tag}a", f"h12{tag}b")
    for name in names:
        hosts = Path("/etc/netns") / name
        hosts.mkdir(parents=True)
        (hosts / "hosts").write_text(f"127.0.0.1 localhost\n{ADDRESSES[0]} {COORDINATOR_NAME}\n")
        _ip("netns", "add", name)
    try:
        _ip("link", "add", links[0], "netns", names[0], "type", "veth", "peer", "name", links[1], "netns", names[1])
        for name, link, addr in zip(names, links, ADDRESSES):
            _ip("-n", name, "addr", "add", f"{addr}/64", "dev", link, "nodad")
            _ip("-n", name, "link", "set", "lo", "up")
            _ip("-n", name, "link", "set", link, "up")
        yield list(zip(names, links))
    finally:
        for name in names:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
            shutil.rmtree(Path("/etc/netns") / name, ignore_errors=True)


def test_a_gloo_job_runs_on_ipv6_addresses_in_two_namespaces(tmp_path: Path, namespaces: list[tuple[str, str]]):
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
    agents = [
        subprocess.Popen(
            ["ip", "netns", "exec", name, sys.executable, "-m", contract.AGENT_MODULE], cwd=ROOT,
            env=project_env(**common, **{contract.NODE_RANK_SETTING: str(node), contract.COORDINATOR_HOST: coordinator,
                                         contract.ADVERTISE_ADDRESS: addr, "GLOO_SOCKET_IFNAME": link}),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for node, ((name, link), addr, coordinator) in enumerate(zip(namespaces, ADDRESSES, coordinators))
    ]
    logs = [agent.communicate(timeout=180)[0] for agent in agents]
    assert [agent.returncode for agent in agents] == [0, 0], "\n".join(logs)
    ranks = {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in out.glob("rank-*.json")}
    assert sorted(ranks) == [0, 1, 2, 3]
    for env in ranks.values():
        assert env["sum"] == 10.0
        assert env["MASTER_ADDR"] == "fd00::2", "torch takes MASTER_ADDR bare"
        assert env["JAX_COORDINATOR_ADDRESS"] == "[fd00::2]:29532"
        assert env["POD_IPS"] == "fd00::2,fd00::3"
        assert json.loads(env["TF_CONFIG"])["cluster"]["worker"] == [
            "[fd00::2]:29564", "[fd00::2]:29565", "[fd00::3]:29564", "[fd00::3]:29565"]
