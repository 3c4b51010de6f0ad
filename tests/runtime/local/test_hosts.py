"""torchrun's per-node command lines: the same ``launch --nnodes 2 --rdzv-endpoint HOST:PORT`` line on
each of two hosts (network namespaces, tests/netns.py) makes one job, each launcher running its own
host's agent: node ranks from ``--node-rank``, else in join order with the endpoint's host first, as
torchrun's c10d rendezvous gives them; a real gloo all-reduce spans both hosts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from runtime.agent import contract
from runtime.agent.errors import HttpError
from runtime.local import launch_plan
from runtime.local.hosts import MISSING_TOKEN, JoinService
from tests.conftest import ROOT, launch, project_env, wait_until
from tests.netns import IPV4_ADDRESSES, ipv4_pair

pytestmark = pytest.mark.process

ALL_REDUCE = """
import json, os, sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
value = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(value)
keys = ("RANK", "NODE_RANK", "MASTER_ADDR", "POD_IPS", "WORLD_SIZE", "TORCHELASTIC_RUN_ID")
with open(os.path.join(sys.argv[1], f"rank-{dist.get_rank()}.json"), "w") as f:
    json.dump({"sum": value.item(), **{k: os.environ[k] for k in keys}}, f)
dist.destroy_process_group()
"""


def test_node_ranks_go_in_join_order_or_as_asked_and_conflicts_are_refused():
    service = JoinService("t", "job", 3, 29500)
    assert service.join("a", None, 3, "10.0.0.2", 1)["coordinator"] == ["10.0.0.2", 1]
    assert service.join("b", 2, 3, "10.0.0.4", 3)["node_id"] == 2
    assert service.join("c", None, 3, "10.0.0.3", 2) == {"node_id": 1, "coordinator": ["10.0.0.2", 1],
                                                        "master_port": 29500}
    assert service.join("c", None, 3, "10.0.0.3", 2)["node_id"] == 1, "asking again gets the same rank"
    refused = [("d", None, 3, "all joined"), ("d", 1, 3, "another host's launcher has node rank 1"),
               ("d", None, 4, "--nnodes=4 is invalid: the launcher at the rendezvous endpoint runs 3 nodes"),
               ("d", 3, 3, "--node-rank=3 is invalid")]
    for key, rank, nodes, message in refused:
        with pytest.raises(HttpError, match=message) as info:
            service.join(key, rank, nodes, "10.0.0.9", 9)
        assert info.value.status == 409


def test_node_0_is_not_known_until_it_joins():
    service = JoinService("t", "job", 2, 29500)
    assert service.join("a", 1, 2, "10.0.0.3", 5)["coordinator"] is None
    assert service.join("b", 0, 2, "10.0.0.2", 6)["coordinator"] == ["10.0.0.2", 6]
    assert service.join("a", 1, 2, "10.0.0.3", 5)["coordinator"] == ["10.0.0.2", 6]


def run_in(namespace: str, argv: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(["ip", "netns", "exec", namespace, *argv], cwd=ROOT, env=dict(env),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def per_node_job(tmp_path: Path, ranks: tuple[list[str], list[str]]) -> tuple[list[int], list[str], list[dict]]:
    """Run the same command line (plus ``ranks``' flags) on both hosts, the non-endpoint host first:
    exit codes, outputs, and every rank's report."""
    out = tmp_path / "out"
    out.mkdir()
    script = tmp_path / "allreduce.py"
    script.write_text(ALL_REDUCE)
    token = uuid.uuid4().hex
    line = [sys.executable, "-m", "runtime", "launch", "--nnodes", "2", "--nproc-per-node", "2", "--rdzv-backend",
            "c10d", "--rdzv-endpoint", f"{IPV4_ADDRESSES[0]}:29400", "--rdzv-id", "hosts", "--grace-period", "2"]
    with ipv4_pair() as hosts:
        procs = [run_in(hosts[i][0], [*line, *ranks[i], str(script), str(out)],
                        project_env(**{contract.TOKEN: token, "GLOO_SOCKET_IFNAME": hosts[i][1]}))
                 for i in (1, 0)][::-1]
        outputs = [proc.communicate(timeout=240)[0] for proc in procs]
    return [p.returncode for p in procs], outputs, [json.loads(p.read_text()) for p in sorted(out.glob("rank-*"))]


def test_the_same_torchrun_line_on_two_hosts_makes_one_job_ranked_in_join_order(tmp_path: Path):
    codes, outputs, reports = per_node_job(tmp_path, ([], []))
    assert codes == [0, 0], outputs
    assert [r["sum"] for r in reports] == [10.0] * 4  # 1 + 2 + 3 + 4: one world across both hosts
    by_rank = {r["RANK"]: r for r in reports}
    assert [by_rank[r]["NODE_RANK"] for r in "0123"] == ["0", "0", "1", "1"]
    assert {r["MASTER_ADDR"] for r in reports} == {IPV4_ADDRESSES[0]}, "the endpoint's host joined first: node 0"
    assert {r["POD_IPS"] for r in reports} == {",".join(IPV4_ADDRESSES)}
    assert {r["TORCHELASTIC_RUN_ID"] for r in reports} == {"hosts"}
    assert f"node 0 of 2 on {IPV4_ADDRESSES[0]}" in outputs[0] and "serving the rendezvous there" in outputs[0]
    assert f"node 1 of 2 on {IPV4_ADDRESSES[1]}" in outputs[1]
    assert "--rdzv-endpoint" not in outputs[0].split("ignoring", 1)[1].split("\n")[0]


def test_node_ranks_as_given_even_when_node_0_is_not_the_endpoints_host(tmp_path: Path):
    codes, outputs, reports = per_node_job(tmp_path, (["--node-rank", "1"], ["--node-rank", "0"]))
    assert codes == [0, 0], outputs
    assert [r["sum"] for r in reports] == [10.0] * 4
    assert {r["MASTER_ADDR"] for r in reports} == {IPV4_ADDRESSES[1]}
    assert {(r["RANK"], r["NODE_RANK"]) for r in reports} == {("0", "0"), ("1", "0"), ("2", "1"), ("3", "1")}


def test_a_per_node_line_without_the_jobs_token_is_refused_naming_it_in_one_line_before_anything_else(script):
    env = {k: v for k, v in os.environ.items() if k != contract.TOKEN}
    result = subprocess.run([sys.executable, "-m", "runtime", "launch", "--nnodes", "2", "--rdzv-backend", "c10d",
                             "--rdzv-endpoint", "127.0.0.1:29411", str(script("print('never')\n"))], cwd=ROOT,
                            env={**project_env(), **env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2
    assert f"--rdzv-endpoint: every host's launcher needs the job's token in {contract.TOKEN}" in MISSING_TOKEN
    assert result.stderr.splitlines() == [f"python -m runtime launch: error: {MISSING_TOKEN} (see --help)"]


def test_standalone_still_runs_every_node_here(script):
    result = launch("--nnodes", "2", "--standalone", "--rdzv-endpoint", "127.0.0.1:29412", "--master-port", "0",
                    str(script("import os\nprint('rank', os.environ['RANK'])\n")))
    assert result.returncode == 0, result.stderr
    assert sorted(line for line in result.stdout.splitlines() if "rank" in line) == [
        "[rank 0] rank 0", "[rank 1] rank 1"]


def test_a_failing_rank_on_one_host_ends_both_launchers_with_its_code(script):
    """Two per-node launchers on one machine (the first to bind the endpoint serves it): rank 3, on
    node 1, exits 5; each launcher exits with the job's code, node 0's naming the rank."""
    path = script("import os, sys, time\nif os.environ['RANK'] == '3':\n    sys.exit(5)\ntime.sleep(60)\n")
    port = launch_plan.free_port("127.0.0.1")
    line = [sys.executable, "-m", "runtime", "launch", "--nnodes", "2", "--nproc-per-node", "2", "--rdzv-endpoint",
            f"127.0.0.1:{port}", "--grace-period", "1", "--master-port", "0", str(path)]
    env = project_env(**{contract.TOKEN: uuid.uuid4().hex})
    first = subprocess.Popen(line, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert wait_until(lambda: not launch_plan.port_is_free("127.0.0.1", port), timeout=60), "the first serves the join"
    second = subprocess.Popen(line, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    errs = [proc.communicate(timeout=120)[1] for proc in (first, second)]
    assert [first.returncode, second.returncode] == [5, 5], errs
    assert errs[0].strip().splitlines()[-1] == (
        "[trainplane] exit code 5: rank 3's own exit code (node 1 at 127.0.0.1), passed through (not the launcher's)")
    assert "node 1 of 2 on 127.0.0.1" in errs[1]
