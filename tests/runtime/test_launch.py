"""Local launch end to end: real agent processes, real sockets, real torch.distributed (gloo)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from runtime.agent import contract
from runtime.client import JobClient
from runtime.local import free_port
from tests.conftest import ROOT, launch, processes_with, project_env, wait_until

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
    assert len(tf_workers) == world_size
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
        assert env["JAX_COORDINATOR_ADDRESS"] == f"{pod_ips[0]}:{env['MASTER_PORT']}"
        assert env["TORCHELASTIC_RUN_ID"] == "contract"
        assert env["TORCHELASTIC_RESTART_COUNT"] == "0"
        tf = json.loads(env["TF_CONFIG"])
        assert tf["task"] == {"type": "worker", "index": rank}
        assert tf["cluster"]["worker"] == tf_workers
        assert tf_workers[rank].split(":")[0] == pod_ips[node]


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
    assert "never runs" not in result.stdout


def test_sigterm_to_the_launcher_stops_everything(tmp_path: Path, script):
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
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM
    assert "received SIGTERM" in err
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


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--workers", "0", "x.py"], "--workers"),
        (["--workers", "2", "--quorum-workers", "3", "examples/ddp_digits.py"], "--quorum-workers"),
        (["--workers", "2", "does/not/exist.py"], "SCRIPT"),
        (["--master-port", "70000", "examples/ddp_digits.py"], "--master-port"),
        (["--num-proc", "two", "examples/ddp_digits.py"], "--num-proc"),
        (["--mode", "service", "examples/ddp_digits.py"], "SCRIPT"),
        (["--workers", "2"], "SCRIPT"),
        (["--mode", "service", "--tree-fanout", "1"], "--tree-fanout"),
        (["--mode", "service", "--tree-threshold", "0"], "--tree-threshold"),
        (["--mode", "rpc"], "--mode"),
        (["--mode", "service", "--pythonpath", "no/such/dir"], "--pythonpath"),
        (["--no-python", "-m", "pkg.train"], "--no-python"),
        (["--mode", "service", "--no-python"], "--no-python"),
    ],
)
def test_bad_cli_input_is_one_line_naming_the_flag(args: list[str], flag: str):
    result = launch(*args, timeout=30)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert flag in lines[0] and "error" in lines[0]


def test_no_python_runs_a_command_as_is_on_every_rank_with_the_contract():
    report = 'echo "$RANK $WORLD_SIZE $LOCAL_RANK $NODE_RANK $(basename "$(readlink /proc/$$/exe)")"'
    result = launch("--workers", "2", "--num-proc", "2", "--master-port", "0", "--no-python", "sh", "-c", report)
    assert result.returncode == 0, result.stderr
    lines = sorted(line.rsplit(" ", 1) for line in result.stdout.splitlines() if line.startswith("[rank "))
    assert [line for line, _ in lines] == [f"[rank {r}] {r} 4 {r % 2} {r // 2}" for r in range(4)]
    assert all("python" not in exe for _, exe in lines), "the command replaces the bootstrap, no interpreter"


def test_a_command_that_cannot_be_found_fails_the_job_with_127_and_says_why():
    result = launch("--workers", "1", "--no-python", "no-such-command-trainplane", "--flag", timeout=60)
    assert result.returncode == 127
    assert "cannot run command 'no-such-command-trainplane': No such file or directory" in result.stderr
    assert "exited with code 127" in result.stderr


def test_a_command_dies_with_its_agent():
    marker = f"marker-{uuid.uuid4().hex}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "runtime", "launch", "--workers", "1", "--num-proc", "1", "--master-port", "0",
         "--job-name", marker, "--no-python", "sleep", "300"],
        cwd=ROOT, env=project_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        assert wait_until(lambda: len(with_argv0(marker, b"sleep")) == 1, timeout=30)
        (command,) = with_argv0(marker, b"sleep")
        (agent,) = [pid for pid in processes_with(marker) if command_line(pid)[1:3] == [b"-m", b"runtime.agent"]]
        os.kill(agent, signal.SIGKILL)  # the agent cannot tear down: only the parent-death signal is left
        assert wait_until(lambda: command_line(command) != [b"sleep", b"300"], timeout=15)
    finally:
        proc.kill()
        proc.wait()


def command_line(pid: int) -> list[bytes]:
    """A process's argv, empty if it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
    except OSError:
        return []


def with_argv0(marker: str, name: bytes) -> list[int]:
    """Live processes mentioning ``marker`` whose program is ``name``."""
    return [pid for pid in processes_with(marker) if command_line(pid)[:1] == [name]]


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
    assert (logs / "verdict.json").exists() and not (logs / "run").exists()
    assert not list(Path(tempfile.gettempdir()).glob(f"trainplane-{job}-*"))


def test_per_rank_log_files(tmp_path: Path, script):
    path = script("import os, sys\nprint('hello from', os.environ['RANK'])\nprint('oops', file=sys.stderr)\n")
    logs = tmp_path / "logs"
    result = launch("--workers", "2", "--num-proc", "1", "--master-port", "0", "--log-dir", str(logs), str(path))
    assert result.returncode == 0, result.stderr
    assert "[rank 1] hello from 1" in result.stdout
    for node, rank in ((0, 0), (1, 1)):
        text = (logs / f"node-{node}" / "gen-1" / f"rank-{rank}.log").read_text()
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
        connection = logs / "connection.json"
        assert wait_until(connection.exists, timeout=60)
        assert connection.stat().st_mode & 0o777 == 0o600
        with JobClient.from_file(connection) as client:
            assert client.call("tests.runtime.service_fns:rank", timeout=60) == [0, 1, 2, 3]
            assert client.call("user_fns:where", timeout=60) == [0, 1, 2, 3]
            assert client.info().mode == "service"
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGINT
    assert "service ready at http://" in err
    assert wait_until(lambda: not processes_with(marker), timeout=10)
