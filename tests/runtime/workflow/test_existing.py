"""ExistingCompute: attach the workflow API to a service-mode job that is already running, as the
stack's job is reached through a port-forward; and the service example driven that way."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime import Unauthorized
from runtime.agent import contract
from runtime.agent.errors import ConfigError, RendezvousError
from runtime.client import JobClient
from runtime.local import jobs, launch_plan
from runtime.workflow import ExistingCompute, fn
from runtime.workflow.attach import POLL_INTERVAL, wait_until_serving
from testbed import service_fns
from tests.conftest import ROOT, project_env

pytestmark = pytest.mark.process

EXAMPLES = ROOT / "examples"


def service_job(tmp_path: Path, workers: int) -> jobs.LocalJob:
    """A local service-mode job (pytorch) whose processes import from ``examples/``, as the stack's do."""
    return jobs.start(jobs.LocalJobSpec(
        workers=workers, num_proc=1, mode="service", distribution="pytorch", master_port=0, grace_period=1.0,
        log_dir=str(tmp_path / "logs"), pythonpath=(str(EXAMPLES),),
    ))


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[jobs.LocalJob]:
    """One running 2-node job, started by someone other than the test (as a stack's job is)."""
    started = service_job(tmp_path_factory.mktemp("existing"), workers=2)
    try:
        started.wait_ready(120)
        yield started
    finally:
        started.stop(timeout=15)


def status_of(job: jobs.LocalJob) -> str:
    with JobClient(job.url, job.token) as client:
        return client.info().status


def test_attach_reads_the_jobs_shape_calls_it_and_detaching_leaves_it_running(job: jobs.LocalJob):
    compute = ExistingCompute(job.url, job.token)
    with fn(service_fns.whoami).to(compute) as whoami:
        assert (compute.workers, compute.num_proc, compute.distribution) == (2, 1, "pytorch")
        first = whoami.options(timeout=60)()
        assert [r["rank"] for r in first] == [0, 1]
    assert not compute.running
    assert job.running() and status_of(job) == "running"

    again = fn(service_fns.whoami).to(ExistingCompute(job.url, job.token))
    second = again.options(timeout=60)()
    again.teardown()
    assert [r["pid"] for r in second] == [r["pid"] for r in first], "the same processes serve the next attach"
    assert [r["calls"] for r in second] == [r["calls"] + 1 for r in first], "their state survived the detach"
    assert status_of(job) == "running"


def test_attach_waits_for_a_job_that_is_still_starting(tmp_path: Path):
    starting = service_job(tmp_path, workers=1)
    try:
        compute = ExistingCompute(starting.url, starting.token, ready_timeout=120)
        assert fn(service_fns.rank).to(compute).options(timeout=60)() == [0]
    finally:
        starting.stop(timeout=15)


def test_an_unreachable_url_fails_after_the_ready_timeout_naming_the_url():
    url = f"http://127.0.0.1:{launch_plan.free_port('127.0.0.1')}"
    with pytest.raises(RendezvousError, match=rf"no running service-mode job at {re.escape(url)} within 1 s "
                                              r"\(not reachable: .*port-forward"):
        fn(service_fns.rank).to(ExistingCompute(url, "any-token", ready_timeout=1))


def test_the_ready_timeout_is_kept_on_the_clock_looking_every_poll_interval():
    """A fake clock that each wait moves by the poll interval: an unreachable URL is looked at until
    the ready timeout has passed, and not once more."""
    now, looks = [0.0], []
    url = f"http://127.0.0.1:{launch_plan.free_port('127.0.0.1')}"

    def wait(seconds: float) -> None:
        looks.append(now[0])
        now[0] += seconds

    with pytest.raises(RendezvousError, match="within 3 s"):
        wait_until_serving(url, "t", "json", 3.0, clock=lambda: now[0], sleep=wait)
    assert looks == [POLL_INTERVAL * i for i in range(6)] and now[0] == 6 * POLL_INTERVAL


def test_a_wrong_token_fails_at_once_as_unauthorized(job: jobs.LocalJob):
    """Not retried: a retried wrong token would end in the ready timeout's RendezvousError instead."""
    compute = ExistingCompute(job.url, "wrong-token", ready_timeout=60)
    with pytest.raises(Unauthorized, match="401"):
        fn(service_fns.rank).to(compute)
    assert not compute.running


def test_a_url_of_another_node_is_refused_pointing_at_node_0(job: jobs.LocalJob):
    node_1 = f"http://{job.plan.addresses[1]}:{job.plan.ports[1]}"
    with pytest.raises(ConfigError, match=r"not its coordinator: connect to node 0 \(pod <job>-0\)"):
        fn(service_fns.rank).to(ExistingCompute(node_1, job.token))


def test_a_batch_job_is_refused(tmp_path: Path, script):
    sleeper = script("import time\ntime.sleep(60)\n")
    batch = jobs.start(jobs.LocalJobSpec(entrypoint=(str(sleeper),), master_port=0, grace_period=1.0,
                                           log_dir=str(tmp_path / "logs")))
    try:
        with pytest.raises(ConfigError, match="is a batch-mode job, which takes no calls"):
            fn(service_fns.rank).to(ExistingCompute(batch.url, batch.token, ready_timeout=60))
    finally:
        batch.stop(timeout=15)


@pytest.mark.parametrize(("kwargs", "field"), [({"url": "127.0.0.1:32300"}, "url"),
                                               ({"ready_timeout": -1}, "ready_timeout"),
                                               ({"serialization": "yaml"}, "serialization")])
def test_bad_attach_settings_name_the_field(kwargs, field: str):
    with pytest.raises(ConfigError, match=f"^{field}="):
        ExistingCompute(**{"url": "http://127.0.0.1:32300", "token": "t", **kwargs})


def test_an_existing_jobs_distribution_and_size_cannot_be_changed_from_the_client():
    with pytest.raises(ConfigError, match="change the job's distribution, workers and numProc in the stack"):
        ExistingCompute("http://127.0.0.1:32300", "t").distribute("pytorch", workers=4)


def run_example(*args: str, token: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``examples/service_digits.py ARGS`` with the token in the environment, as the CI workflow runs it."""
    return subprocess.run([sys.executable, str(EXAMPLES / "service_digits.py"), *args], cwd=cwd,
                          env=project_env(**{contract.TOKEN: token}), capture_output=True, text=True, timeout=600)


def test_the_example_trains_an_existing_job_and_checks_its_accuracy(job: jobs.LocalJob, tmp_path: Path):
    passed = run_example("--url", job.url, "--calls", "2", "--epochs-per-call", "4", "--min-accuracy", "0.9",
                         token=job.token, cwd=tmp_path)

    assert passed.returncode == 0, passed.stderr[-3000:]
    assert f"attached to {job.url}: 2 nodes x 1 processes" in passed.stdout
    accuracy = float(re.search(r"held-out accuracy (\S+) after 8 epochs", passed.stdout).group(1))
    assert accuracy >= 0.9
    assert status_of(job) == "running", "the script detaches; the job stays"

    failed = run_example("--url", job.url, "--calls", "1", "--epochs-per-call", "1", "--min-accuracy", "1",
                         token=job.token, cwd=tmp_path)

    assert failed.returncode == 1, failed.stderr[-3000:]
    assert "after 9 epochs" in failed.stdout, "the second run continues the job's model"
    assert re.search(r"held-out accuracy 0\.\d{4} is below --min-accuracy 1$", failed.stderr.strip())


@pytest.mark.parametrize(("args", "env", "message"), [
    (["--min-accuracy", "1.01"], {}, "1.01 is not an accuracy: use a number from 0 to 1"),
    (["--url", "http://127.0.0.1:32300"], {contract.TOKEN: ""}, f"--url needs the job's token: set {contract.TOKEN}"),
    (["--url", "http://127.0.0.1:32300", "--workers", "3"], {contract.TOKEN: "t"},
     "--workers and --num-proc size a local job"),
    (["--url", "http://127.0.0.1:32300", "--image", "trainer:1"], {contract.TOKEN: "t"},
     "--url attaches to a running job and --image deploys one: pass one of them"),
    (["--namespace", "research", "--keep"], {}, "--namespace, --keep configure a Kubernetes job: add --image IMAGE"),
])
def test_the_examples_inconsistent_command_lines_are_refused_before_anything_runs(args, env, message, tmp_path):
    refused = subprocess.run([sys.executable, str(EXAMPLES / "service_digits.py"), *args], cwd=tmp_path,
                             env=project_env(**env), capture_output=True, text=True, timeout=60)

    assert refused.returncode == 2
    assert message in refused.stderr


def test_the_examples_driver_imports_no_torch(tmp_path: Path):
    probe = (f"import sys; sys.path.insert(0, {str(EXAMPLES)!r}); import service_digits; "
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'sklearn', 'ddp_digits')))")
    result = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=project_env(), capture_output=True,
                            text=True, timeout=60)

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
