"""Local launch end to end: real agent processes, real sockets, real torch.distributed (gloo)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from runtime.agent import contract
from runtime.client import JobClient
from runtime.local import jobs, launch_plan
from runtime.local.launch_plan import free_port
from tests.conftest import ROOT, launch, processes_with, project_env, wait_until

pytestmark = pytest.mark.process

ENV_DUMP = """
import json, os, sys
out = sys.argv[1]
keys = [k for k in os.environ if k in {keys!r}]
with open(os.path.join(out, "rank-" + os.environ["RANK"] + ".json"), "w") as f:
    json.dump({{k: os.environ[k] for k in keys}}, f)
"""
CONTRACT_KEYS = (
    "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "NODE_WORLD_SIZE",
    "GROUP_WORLD_SIZE", "POD_IPS", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT", "JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID",
    "JAX_LOCAL_DEVICE_IDS", "TF_CONFIG",
)


@pytest.mark.parametrize(("workers", "num_proc"), [(2, 2), (3, 1)])
def test_environment_contract_read_back_from_every_process(tmp_path: Path, script, workers: int, num_proc: int):
    out = tmp_path / "env"
    out.mkdir()
    path = script(ENV_DUMP.format(keys=CONTRACT_KEYS))
    result = launch("--workers", str(workers), "--num-proc", str(num_proc), "--master-port", "0",
                    "--job-name", "contract", str(path), str(out))
    assert result.returncode == 0, result.stderr
    world_size = workers * num_proc
    envs = {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in out.glob("rank-*.json")}
    assert sorted(envs) == list(range(world_size))
    pod_ips = envs[0]["POD_IPS"].split(",")
    assert len(pod_ips) == workers and len(set(pod_ips)) == workers
    tf_workers = json.loads(envs[0]["TF_CONFIG"])["cluster"]["worker"]
    assert len(set(tf_workers)) == len(tf_workers) == world_size
    for rank, env in envs.items():
        node, local = divmod(rank, num_proc)
        assert set(env) == set(CONTRACT_KEYS)
        assert env["WORLD_SIZE"] == env["JAX_NUM_PROCESSES"] == str(world_size)
        assert env["RANK"] == env["JAX_PROCESS_ID"] == str(rank)
        assert env["LOCAL_RANK"] == env["JAX_LOCAL_DEVICE_IDS"] == str(local)
        assert env["LOCAL_WORLD_SIZE"] == str(num_proc)
        assert env["NODE_RANK"] == env["GROUP_RANK"] == str(node)
        assert env["NODE_WORLD_SIZE"] == env["GROUP_WORLD_SIZE"] == str(workers)
        assert env["POD_IPS"].split(",") == pod_ips
        assert env["MASTER_ADDR"] == pod_ips[0]
        jax_port = int(env["MASTER_PORT"]) + contract.JAX_PORT_OFFSET
        assert env["JAX_COORDINATOR_ADDRESS"] == f"{pod_ips[0]}:{jax_port}"
        assert env["TORCHELASTIC_RUN_ID"] == "contract"
        assert env["TORCHELASTIC_RESTART_COUNT"] == "0"
        tf = json.loads(env["TF_CONFIG"])
        assert tf["task"] == {"type": "worker", "index": rank}
        assert tf["cluster"]["worker"] == tf_workers
        assert tf_workers[rank].split(":")[0] == pod_ips[node]


ENV_DUMP_ALL = """
import json, os, sys
with open(os.environ["TRAINPLANE_WORLD_FILE"]) as f:
    world_file = json.load(f)
with open(os.path.join(sys.argv[1], "rank-" + os.environ["RANK"] + ".json"), "w") as f:
    json.dump(dict(os.environ, WORLD_FILE_GENERATION=str(world_file["generation"])), f)
"""
OPERATOR_ENV = {
    "PET_NNODES": "2", "PET_NPROC_PER_NODE": "1", "PET_NODE_RANK": "0", "PET_MASTER_ADDR": "job-master-0",
    "PET_MASTER_PORT": "23456", "PET_RDZV_BACKEND": "c10d", "PET_RDZV_ENDPOINT": "job-master-0:23456",
}
"""What the Kubeflow training operator sets on a PyTorchJob's pods for torchrun: inputs to the agent."""
PER_PROCESS_SETTINGS = {contract.TRAINPLANE_GENERATION, contract.TRAINPLANE_WORLD_FILE, contract.MONITOR_MEMBERS}


@pytest.fixture(scope="module")
def inherited_envs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, str]]:
    """Every process's whole environment, read back from a 2 x 1 launch whose launcher (and so
    agents) also carries the operator's PET_* variables and one ordinary variable."""
    tmp = tmp_path_factory.mktemp("inherited")
    out = tmp / "env"
    out.mkdir()
    path = tmp / "dump.py"
    path.write_text(ENV_DUMP_ALL)
    result = launch("--workers", "2", "--num-proc", "1", "--master-port", "0", str(path), str(out),
                    env={**OPERATOR_ENV, "USER_SETTING": "kept"})
    assert result.returncode == 0, result.stderr
    return {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in out.glob("rank-*.json")}


def test_user_processes_get_neither_the_token_nor_agent_settings(inherited_envs: dict[int, dict[str, str]]):
    assert sorted(inherited_envs) == [0, 1]
    for env in inherited_envs.values():
        assert contract.TOKEN not in env
        assert {k for k in env if k.startswith("TRAINPLANE_")} == PER_PROCESS_SETTINGS
        assert env["WORLD_FILE_GENERATION"] == env[contract.TRAINPLANE_GENERATION] == "1"
        assert env["USER_SETTING"] == "kept"


def test_user_processes_do_not_see_the_operators_torchrun_arguments(inherited_envs: dict[int, dict[str, str]]):
    for env in inherited_envs.values():
        assert not [k for k in env if k.startswith("PET_")]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="other systems route only 127.0.0.1")
def test_nodes_get_consecutive_loopback_addresses_from_127_0_0_2(inherited_envs: dict[int, dict[str, str]]):
    assert {env["POD_IPS"] for env in inherited_envs.values()} == {"127.0.0.2,127.0.0.3"}


BIND_AND_DUMP = """
import json, os, socket, sys, time
out = sys.argv[1]
rank = int(os.environ["RANK"])
tf = json.loads(os.environ["TF_CONFIG"])
host, port = tf["cluster"]["worker"][tf["task"]["index"]].rsplit(":", 1)
held = [socket.create_server((host, int(port)))]
if rank == 0:
    jax_host, jax_port = os.environ["JAX_COORDINATOR_ADDRESS"].rsplit(":", 1)
    held.append(socket.create_server((os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))))
    held.append(socket.create_server((jax_host, int(jax_port))))
with open(os.path.join(out, "rank-" + str(rank) + ".json"), "w") as f:
    json.dump({k: os.environ[k] for k in ("RANK", "POD_IPS", "MASTER_PORT", "JAX_COORDINATOR_ADDRESS", "TF_CONFIG")}, f)
while len(os.listdir(out)) < int(os.environ["WORLD_SIZE"]):  # hold the ports until every rank holds its own
    time.sleep(0.05)
"""


def test_single_address_fallback_gives_every_process_its_own_ports(tmp_path: Path, script,
                                                                   monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(launch_plan, "loopback_range_usable", lambda: False)
    out = tmp_path / "env"
    out.mkdir()
    spec = jobs.LocalJobSpec(workers=2, num_proc=2, entrypoint=(str(script(BIND_AND_DUMP)), str(out)),
                              distribution="spmd", master_port=0, log_dir=str(tmp_path / "logs"))
    job = jobs.start(spec)
    try:
        assert wait_until(lambda: not job.running(), timeout=120)
    finally:
        job.stop()
    verdict = json.loads(Path(jobs.verdict_path(job.log_dir)).read_text())
    assert verdict["exit_code"] == 0, verdict
    envs = {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in out.glob("rank-*.json")}
    assert sorted(envs) == [0, 1, 2, 3]
    assert {e["POD_IPS"] for e in envs.values()} == {"127.0.0.1,127.0.0.1"}
    assert len({(e["MASTER_PORT"], e["JAX_COORDINATOR_ADDRESS"]) for e in envs.values()}) == 1
    workers = json.loads(envs[0]["TF_CONFIG"])["cluster"]["worker"]
    assert len(set(workers)) == 4
    for rank, env in envs.items():
        tf = json.loads(env["TF_CONFIG"])
        assert tf["cluster"]["worker"] == workers
        assert tf["task"] == {"type": "worker", "index": rank} and env["RANK"] == str(rank)


def test_ddp_digits_reaches_accuracy_with_identical_parameters_on_all_ranks(tmp_path: Path):
    params = tmp_path / "params"
    result = launch("--workers", "2", "--num-proc", "2", "--master-port", "0", str(ROOT / "examples/ddp_digits.py"),
                    "--epochs", "12", "--params-out", str(params), "--checkpoint", str(tmp_path / "ckpt.pt"),
                    timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [json.loads(p.read_text()) for p in sorted(params.glob("rank-*.json"))]
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    assert all(r["world_size"] == 4 for r in ranks)
    assert len({r["params"] for r in ranks}) == 1
    assert ranks[0]["accuracy"] >= 0.90
    assert "held-out accuracy" in result.stdout
    assert (tmp_path / "ckpt.pt").stat().st_size > 0


def test_failing_rank_ends_the_job_with_its_exit_code_and_leaves_no_process(script):
    marker = f"marker-{uuid.uuid4().hex}"
    path = script(
        "import os, sys, time\n"
        f"MARKER = {marker!r}\n"
        "if os.environ['RANK'] == '3':\n"
        "    print('rank three gives up', file=sys.stderr)\n"
        "    sys.exit(7)\n"
        "time.sleep(120)\n"
    )
    result = launch("--workers", "2", "--num-proc", "2", "--master-port", "0", "--job-name", marker, str(path),
                    timeout=60)
    assert result.returncode == 7
    assert "rank 3 (node 1" in result.stderr
    assert "exited with code 7" in result.stderr
    assert "rank three gives up" in result.stderr
    assert wait_until(lambda: not processes_with(marker), timeout=5)


def test_restarts_start_a_new_generation(tmp_path: Path, script):
    flag = tmp_path / "failed-once"
    path = script(
        "import os, sys\n"
        f"flag = {str(flag)!r}\n"
        "if os.environ['RANK'] == '1' and not os.path.exists(flag):\n"
        "    open(flag, 'w').close()\n"
        "    sys.exit(3)\n"
        "print('restart count', os.environ['TORCHELASTIC_RESTART_COUNT'], 'generation',\n"
        "      os.environ['TRAINPLANE_GENERATION'])\n"
    )
    result = launch("--workers", "2", "--num-proc", "1", "--master-port", "0", "--max-restarts", "1", str(path))
    assert result.returncode == 0, result.stderr
    assert "restarting (1/1) as generation 2" in result.stderr
    assert result.stdout.count("restart count 1 generation 2") == 2


def test_quorum_that_cannot_be_met_names_the_missing_nodes(tmp_path: Path, script):
    path = script("print('never runs')\n")
    port = str(free_port("127.0.0.1"))
    env = project_env(**{
        contract.JOB_NAME: "lonely", contract.TOKEN: "t0k3n", contract.NODE_RANK_SETTING: "0",
        contract.WORKERS: "3", contract.QUORUM_TIMEOUT: "1.5", contract.ENTRYPOINT: json.dumps([str(path)]),
        contract.COORDINATOR_HOST: f"127.0.0.1:{port}", contract.AGENT_PORT_SETTING: port,
        contract.ADVERTISE_ADDRESS: "127.0.0.1",
    })
    result = subprocess.run([sys.executable, "-m", "runtime.agent"], env=env, capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == contract.EXIT_RENDEZVOUS
    assert "quorum not met after 1.5 s" in result.stderr
    assert "missing node ranks: 1, 2" in result.stderr
    assert "Likely causes: pods not scheduled" in result.stderr and "image pull" in result.stderr
    assert "never runs" not in result.stdout


QUORUM_DRIVER = """
import sys
from runtime.local import jobs, launch
from runtime.agent import contract

agent_env = jobs.agent_env


def node_1_cannot_start(spec, lp, node_id, *rest):
    env = agent_env(spec, lp, node_id, *rest)
    if node_id == 1:
        env[contract.NUM_PROC] = "broken"  # its agent exits at once, like a pod that crashes on start
    return env


jobs.agent_env = node_1_cannot_start
sys.exit(launch.main(sys.argv[1:]))
"""


def test_a_launch_whose_node_cannot_start_fails_with_the_missing_node_and_likely_causes(script):
    path = script("print('never runs')\n")
    result = subprocess.run(
        [sys.executable, "-c", QUORUM_DRIVER, "--workers", "2", "--quorum-timeout", "1.5", "--master-port", "0",
         str(path)],
        cwd=ROOT, env=project_env(), capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == contract.EXIT_RENDEZVOUS, result.stderr
    assert f"{contract.NUM_PROC}='broken' is invalid: must be a whole number" in result.stderr
    assert "missing node ranks: 1." in result.stderr
    assert "Likely causes: pods not scheduled" in result.stderr
    assert "never runs" not in result.stdout


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_or_sigint_to_the_launcher_stops_everything(tmp_path: Path, script, sig: signal.Signals):
    marker = f"marker-{uuid.uuid4().hex}"
    started = tmp_path / "started"
    started.mkdir()
    path = script(
        f"import os, time\nMARKER = {marker!r}\n"
        f"open(os.path.join({str(started)!r}, os.environ['RANK']), 'w').close()\ntime.sleep(120)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "runtime", "launch", "--workers", "2", "--num-proc", "2", "--master-port", "0",
         "--job-name", marker, str(path)],
        cwd=ROOT, env=project_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert wait_until(lambda: len(list(started.iterdir())) == 4, timeout=30)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + sig
    assert f"[trainplane] received {sig.name}: stopping every agent" in err
    assert wait_until(lambda: not processes_with(marker), timeout=5)


def test_sigkill_of_the_launcher_leaves_no_orphan(script):
    marker = f"marker-{uuid.uuid4().hex}"
    path = script(f"import time\nMARKER = {marker!r}\ntime.sleep(120)\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "runtime", "launch", "--workers", "2", "--num-proc", "1", "--master-port", "0",
         "--job-name", marker, str(path)],
        cwd=ROOT, env=project_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    assert wait_until(lambda: len(processes_with(marker)) >= 4, timeout=30)
    proc.kill()
    proc.wait()
    assert wait_until(lambda: not processes_with(marker), timeout=15)


def only_job_dir(logs: Path, job: str) -> Path:
    """The one run directory a launch made in its ``--log-dir`` base, as torchrun names it: ``<job id>_<random>``."""
    found = [p for p in logs.iterdir() if p.is_dir()]
    assert len(found) == 1 and found[0].name.startswith(job + ("" if job.endswith("-") else "_")), found
    return found[0]


def test_a_node_killed_mid_job_leaves_no_run_directory_behind(tmp_path: Path, script):
    job = f"killed-{uuid.uuid4().hex[:8]}"
    path = script(
        "import os, signal, time\n"
        "if os.environ['RANK'] == '1':\n"
        "    os.kill(os.getppid(), signal.SIGKILL)\n"  # this process's agent: it cannot clean up
        "time.sleep(60)\n"
    )
    logs = tmp_path / "logs"
    result = launch("--workers", "2", "--num-proc", "1", "--master-port", "0", "--job-name", job,
                    "--log-dir", str(logs), str(path), timeout=60)
    assert result.returncode != 0
    job_dir = only_job_dir(logs, job)
    assert (job_dir / "verdict.json").exists() and not (job_dir / "run").exists()
    assert not list(Path(tempfile.gettempdir()).glob(f"trainplane-{job}-*"))


def test_per_rank_log_files(tmp_path: Path, script):
    path = script("import os, sys\nprint('hello from', os.environ['RANK'])\nprint('oops', file=sys.stderr)\n")
    logs = tmp_path / "logs"
    result = launch("--workers", "2", "--num-proc", "1", "--master-port", "0", "--log-dir", str(logs), str(path))
    assert result.returncode == 0, result.stderr
    assert "[rank 1] hello from 1" in result.stdout
    job_dir = only_job_dir(logs, "local-")
    for node, rank in ((0, 0), (1, 1)):
        text = (job_dir / f"node-{node}" / "gen-1" / f"rank-{rank}.log").read_text()
        assert f"hello from {rank}" in text and "oops" in text


def test_service_mode_writes_a_connection_file_serves_calls_and_stops_on_sigint(tmp_path: Path):
    logs = tmp_path / "logs"
    functions = tmp_path / "fns"
    functions.mkdir()
    (functions / "user_fns.py").write_text("import os\n\ndef where():\n    return int(os.environ['RANK'])\n")
    marker = f"marker-{uuid.uuid4().hex}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "runtime", "launch", "--mode", "service", "--workers", "2", "--num-proc", "2",
         "--master-port", "0", "--log-dir", str(logs), "--job-name", marker, "--pythonpath", str(functions)],
        cwd=ROOT, env=project_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert wait_until(lambda: list(logs.glob(f"{marker}_*/connection.json")), timeout=60)
        connection = only_job_dir(logs, marker) / "connection.json"
        assert connection.stat().st_mode & 0o777 == 0o600
        with JobClient.from_file(connection) as client:
            assert client.call("testbed.service_fns:rank", timeout=60) == [0, 1, 2, 3]
            assert client.call("user_fns:where", timeout=60) == [0, 1, 2, 3]
            info = client.info()
            assert (info.mode, info.node_id, info.node_rank) == ("service", 0, 0)
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGINT
    assert "service ready at http://" in err
    assert wait_until(lambda: not processes_with(marker), timeout=10)
