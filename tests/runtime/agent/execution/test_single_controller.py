"""Single-controller jobs end to end: the launcher, real agents, the driver on node 0 only, daemons everywhere.

Ray runs for real (``ray`` from requirements-dev.txt). Monarch does not: its wheel needs a CUDA build
of torch beside ours, so a stand-in (``daemon_standin.py``, put before the worker's command with
``TRAINPLANE_DAEMON_PREFIX``) records the worker command each node would run and blocks like one.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime import TransportError
from runtime.agent import contract
from runtime.agent.execution import controller
from runtime.client import JobClient
from runtime.local import jobs, launch_plan
from runtime.local.jobs import LocalJob, LocalJobSpec
from testbed.jobs import serving
from tests.conftest import ROOT, AgentCluster, launch, processes_with, project_env, wait_until

pytestmark = pytest.mark.process

STANDIN = Path(__file__).parents[2] / "daemon_standin.py"
RAY_ARGS = ("--daemon-arg=--num-cpus=1", "--daemon-arg=--object-store-memory=80000000", "--grace-period", "2")
RAY_TIMEOUT = 300.0
DRIVER_KEYS = ("WORLD_SIZE", "RANK", "NODE_RANK", "LOCAL_WORLD_SIZE", "NODE_WORLD_SIZE", "POD_IPS", "MASTER_PORT",
               "RAY_ADDRESS", "MONARCH_WORKER_ADDRESSES")

MONARCH_DRIVER = f"""
import json, os, signal, sys, time
out = sys.argv[1]
with open(os.path.join(out, "driver.jsonl"), "a") as f:
    f.write(json.dumps({{k: os.environ.get(k) for k in {DRIVER_KEYS!r}}}) + "\\n")
if sys.argv[2] == "block":
    signal.pause()
names = [a.replace("tcp://", "").replace(":", "_") for a in os.environ["MONARCH_WORKER_ADDRESSES"].split(",")]
while not all(os.path.exists(os.path.join(out, n + ".json")) for n in names):
    time.sleep(0.05)
"""


def gone(job: str) -> bool:
    """Whether no process of ``job`` (agents, driver, daemons and what they started) is left."""
    return wait_until(lambda: not processes_with(f"{contract.JOB_NAME}={job}"), timeout=30.0)


def test_ray_driver_runs_once_on_node_0_and_its_tasks_reach_both_nodes(tmp_path: Path):
    job = f"ray-{uuid.uuid4().hex[:8]}"
    out = tmp_path / "driver.json"
    result = launch("--workers", "2", "--distribution", "ray", "--master-port", "0", "--job-name", job, *RAY_ARGS,
                    str(ROOT / "examples/ray_nodes.py"), "--out", str(out), timeout=RAY_TIMEOUT)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["addresses"] == ["127.0.0.2", "127.0.0.3"]
    env = report["env"]
    head_port = int(env["MASTER_PORT"]) + contract.CONTROLLER_PORT_OFFSET
    assert env["RAY_ADDRESS"] == f"127.0.0.2:{head_port}"
    assert [env[k] for k in ("WORLD_SIZE", "RANK", "NODE_RANK", "NODE_WORLD_SIZE")] == ["1", "0", "0", "2"]
    assert env["POD_IPS"] == "127.0.0.2,127.0.0.3"
    assert result.stdout.count("tasks ran on 2 node(s): 127.0.0.2, 127.0.0.3") == 1, "one driver"
    output = result.stdout + result.stderr
    assert "[ray head 0]" in output and "[ray worker 1]" in output
    assert gone(job), processes_with(job)


RAY_TASK_ENV = """
import json, os, sys
import ray
ray.init()

@ray.remote
def env():
    return dict(os.environ)

with open(sys.argv[1], "w") as f:
    json.dump({"task": ray.get(env.remote()), "driver": dict(os.environ)}, f)
"""


def test_ray_tasks_get_none_of_the_agents_settings(tmp_path: Path, script):
    """A Ray task's environment (the raylet's, from the daemon's) has the launcher's PYTHONPATH as it
    was and none of what the agent reads or sets for ranks: MASTER_PORT and
    TORCHELASTIC_SIGNALS_TO_HANDLE (the agent's settings under torchrun's names) nor any
    TRAINPLANE_* variable; the driver keeps its contract."""
    out = tmp_path / "env.json"
    result = launch("--workers", "1", "--distribution", "ray", "--master-port", "0", *RAY_ARGS,
                    str(script(RAY_TASK_ENV)), str(out), timeout=RAY_TIMEOUT)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(out.read_text())
    task = seen["task"]
    leaked = sorted(k for k in task if k in ("MASTER_PORT", "TORCHELASTIC_SIGNALS_TO_HANDLE", "MASTER_ADDR", "RANK")
                    or k.startswith("TRAINPLANE_"))
    assert leaked == []
    assert task.get("PYTHONPATH") == project_env()["PYTHONPATH"]
    assert seen["driver"]["MASTER_PORT"].isdigit() and seen["driver"]["RANK"] == "0"


def test_the_ray_drivers_exit_code_is_the_jobs_and_the_cluster_is_stopped(script):
    job = f"ray-{uuid.uuid4().hex[:8]}"
    result = launch("--workers", "2", "--distribution", "ray", "--master-port", "0", "--job-name", job, *RAY_ARGS,
                    str(script("import sys\nsys.exit(3)\n")), timeout=RAY_TIMEOUT)
    assert result.returncode == 3, result.stderr[-3000:]
    assert "rank 0 (node 0 at 127.0.0.2, local rank 0) exited with code 3" in result.stderr
    assert gone(job), processes_with(job)


def test_a_missing_ray_executable_fails_the_job_naming_it(tmp_path: Path, script):
    python = tmp_path / "python"
    python.symlink_to(sys.executable)  # outside the venv: the standard library only, no ray beside it
    job = f"ray-{uuid.uuid4().hex[:8]}"
    result = launch_with(python, "--workers", "2", "--distribution", "ray", "--master-port", "0", "--job-name", job,
                         str(script("print('never runs')\n")), env={"PATH": "/usr/bin:/bin"})
    assert result.returncode == 127, result.stderr[-3000:]
    assert (f"the ray head daemon (node 0 at 127.0.0.2) exited with code 127 while the driver was running; last "
            f"stderr lines:\n[trainplane node 0]     trainplane: cannot start the ray head: no executable 'ray' beside "
            f"{python} or on PATH; install it in the image") in result.stderr
    assert "Traceback" not in result.stderr and "never runs" not in result.stdout
    assert gone(job)


def launch_with(python: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run the launcher with another interpreter and environment."""
    return subprocess.run([str(python), "-m", "runtime", "launch", *args], cwd=ROOT, env=project_env(**env),
                          capture_output=True, text=True, timeout=120)


def monarch_env(records: Path, **extra: str) -> dict[str, str]:
    """Settings that put the stand-in before every Monarch worker, recording into ``records``."""
    return {contract.DAEMON_PREFIX: json.dumps([sys.executable, str(STANDIN)]), "STANDIN_DIR": str(records), **extra}


def launch_monarch(records: Path, driver: Path, mode: str, **extra: str) -> tuple[str, subprocess.CompletedProcess]:
    """Run a 2-node monarch job whose driver records its environment and then ``wait``s for both
    workers' records, or ``block``s until stopped."""
    job = f"monarch-{uuid.uuid4().hex[:8]}"
    result = launch_with(Path(sys.executable), "--workers", "2", "--distribution", "monarch", "--master-port", "0",
                         "--job-name", job, "--grace-period", "1", str(driver), str(records), mode,
                         env=monarch_env(records, **extra))
    return job, result


def test_monarch_controller_gets_every_workers_address_and_runs_on_node_0_only(tmp_path: Path, script):
    job, result = launch_monarch(tmp_path, script(MONARCH_DRIVER), "wait")
    assert result.returncode == 0, result.stderr[-3000:]
    [driver] = [json.loads(line) for line in (tmp_path / "driver.jsonl").read_text().splitlines()]
    port = int(driver["MASTER_PORT"]) + contract.CONTROLLER_PORT_OFFSET
    addresses = [f"tcp://127.0.0.2:{port}", f"tcp://127.0.0.3:{port}"]
    assert driver["MONARCH_WORKER_ADDRESSES"] == ",".join(addresses)
    assert [driver[k] for k in ("WORLD_SIZE", "RANK", "NODE_RANK", "NODE_WORLD_SIZE")] == ["1", "0", "0", "2"]
    for address in addresses:
        record = json.loads((tmp_path / f"{address[6:].replace(':', '_')}.json").read_text())
        assert record["argv"] == [sys.executable, "-c", controller.MONARCH_WORKER, address]
    assert gone(job), processes_with(job)


def test_monarch_workers_sharing_an_address_get_ports_of_their_own(tmp_path: Path, script,
                                                                    monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(launch_plan, "loopback_range_usable", lambda: False)  # every node on 127.0.0.1
    for name, value in monarch_env(tmp_path).items():
        monkeypatch.setenv(name, value)
    spec = LocalJobSpec(workers=3, num_proc=1, distribution="monarch", master_port=0, grace_period=1,
                        entrypoint=(str(script(MONARCH_DRIVER)), str(tmp_path), "wait"),
                        log_dir=str(tmp_path / "logs"))
    job = jobs.start(spec)
    try:
        assert wait_until(lambda: not job.running(), timeout=120)
    finally:
        job.stop()
    assert json.loads(Path(jobs.verdict_path(job.log_dir)).read_text())["exit_code"] == 0
    [driver] = [json.loads(line) for line in (tmp_path / "driver.jsonl").read_text().splitlines()]
    port = int(driver["MASTER_PORT"]) + contract.CONTROLLER_PORT_OFFSET
    addresses = [f"tcp://127.0.0.1:{port + i}" for i in range(3)]
    assert driver["MONARCH_WORKER_ADDRESSES"] == ",".join(addresses)
    for address in addresses:  # each worker was told to serve on the address the driver attaches to
        record = json.loads((tmp_path / f"{address[6:].replace(':', '_')}.json").read_text())
        assert record["argv"][-1] == address


def test_a_monarch_worker_dying_under_a_running_controller_fails_the_job(tmp_path: Path, script):
    job, result = launch_monarch(tmp_path, script(MONARCH_DRIVER), "block", STANDIN_FAIL_AT="127.0.0.3",
                                 STANDIN_EXIT="5")
    assert result.returncode == 5, result.stderr[-3000:]
    assert "the monarch worker daemon (node 1 at 127.0.0.3) exited with code 5 while the driver was running" in (
        result.stderr)
    assert gone(job), processes_with(job)


def test_a_monarch_worker_without_torchmonarch_fails_the_job_naming_it(tmp_path: Path, script):
    python = tmp_path / "python"
    python.symlink_to(sys.executable)  # outside the venv: the standard library only
    job = f"monarch-{uuid.uuid4().hex[:8]}"
    result = launch_with(python, "--workers", "2", "--distribution", "monarch", "--master-port", "0", "--job-name",
                         job, "--grace-period", "1", str(script("import signal\nsignal.pause()\n")), env={})
    assert result.returncode == 1, result.stderr[-3000:]
    assert "monarch worker daemon (node " in result.stderr
    assert ("trainplane: cannot start the monarch worker: No module named 'monarch'; install torchmonarch in the "
            "image") in result.stderr
    assert gone(job), processes_with(job)


def test_a_daemon_only_node_stops_when_node_0_is_lost(tmp_path: Path, script):
    records = tmp_path / "records"
    records.mkdir()
    driver = script("import signal\nsignal.pause()\n")
    job = AgentCluster(tmp_path, [str(driver)], workers=2, TRAINPLANE_DISTRIBUTION="monarch",
                       **monarch_env(records))
    try:
        assert wait_until(lambda: len(list(records.glob("*.json"))) == 2, timeout=60), "both workers started"
        job.kill(0)
        assert job.agents[1].wait(timeout=60) == contract.EXIT_NODE_LOST
        assert "which runs the driver, has been unreachable" in job.log(1)
        assert "daemon serves nobody: stopping" in job.log(1)
        assert gone(job.job), processes_with(job.job)
    finally:
        job.close()


@pytest.fixture
def monarch_service(tmp_path: Path) -> Iterator[LocalJob]:
    spec = LocalJobSpec(workers=2, mode="service", distribution="monarch", master_port=0, grace_period=1.0,
                        pythonpath=(str(ROOT),), job_name=f"monarch-{uuid.uuid4().hex[:8]}", env=monarch_env(tmp_path))
    with serving(spec, ready_timeout=60) as running:
        yield running


def test_monarch_service_calls_run_on_node_0_only(monarch_service: LocalJob):
    with JobClient(monarch_service.url, monarch_service.token) as client:
        [env] = client.call("testbed.service_fns:environment", list(DRIVER_KEYS), timeout=60)
        assert (env["RANK"], env["WORLD_SIZE"], env["NODE_RANK"]) == ("0", "1", "0")
        assert env["MONARCH_WORKER_ADDRESSES"].count("tcp://") == 2
        assert client.call("testbed.service_fns:rank", node_ranks=[0], timeout=60) == [0]
        with pytest.raises(TransportError) as info:
            client.call("testbed.service_fns:rank", node_ranks=[0, 1], timeout=60)
    assert info.value.status == 400
    assert "node rank(s) [1] run no processes (a monarch job runs calls on node 0 only)" in str(info.value)


@pytest.mark.parametrize(("flags", "message"), [
    (("--distribution", "ray", "--num-proc", "2"),
     "--num-proc: a ray job runs one driver process, on node 0, and ray's own workers on every node (got 2); set "
     "--num-proc to 1"),
    (("--distribution", "monarch", "--min-workers", "1"),
     "--min-workers/--max-workers: a monarch job cannot be elastic (its head is node 0); unset --min-workers and "
     "--max-workers"),
    (("--distribution", "monarch", "--daemon-arg=--num-cpus=1"),
     "--daemon-arg: applies to --distribution ray only: the arguments go to `ray start` (got --distribution "
     "monarch); unset --daemon-arg, or use --distribution ray"),
    (("--daemon-arg=--num-cpus=1",),
     "--daemon-arg: applies to --distribution ray only: the arguments go to `ray start` (got --distribution spmd); "
     "unset --daemon-arg, or use --distribution ray"),
])
def test_flags_a_single_controller_job_cannot_take_are_refused(script, flags: tuple[str, ...], message: str):
    result = launch("--workers", "2", *flags, str(script("pass\n")))
    assert result.returncode == contract.EXIT_USAGE
    assert result.stderr.splitlines() == [f"python -m runtime launch: error: {message} (see --help)"]
