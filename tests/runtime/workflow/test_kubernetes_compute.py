"""KubernetesCompute's driver logic against a fake of its one Automation API seam (``Stacks``), with
everything behind the port-forward real: the ``kubernetes`` client's port-forward to a stand-in API
server (``fake_apiserver``), the local relay, and a real local service job rendered from the inline
program (``kubecluster``)."""

from __future__ import annotations

import getpass
import re
import subprocess
import sys
from pathlib import Path

import pytest

from runtime import Unauthorized
from runtime.agent import contract
from runtime.agent.errors import ConfigError, RendezvousError
from runtime.workflow import DeployError, KubernetesCompute, fn
from runtime.workflow import program as job_program
from runtime.workflow.kubernetes_compute import default_job_name
from testbed import service_fns
from tests.components.componenttest import KUBECONFIG, Deployment
from tests.conftest import ROOT, processes_with, project_env, wait_until
from tests.runtime.kubecluster import FakeCluster

pytestmark = pytest.mark.process

IMAGE = "registry.example/trainer:1"


def compute_on(cluster: FakeCluster, **overrides) -> KubernetesCompute:
    """A compute whose jobs import from this repository (as an image's ``pythonpath`` would)."""
    settings = {"image": IMAGE, "namespace": "research", "kubeconfig": cluster.kubeconfig(),
                "pythonpath": [str(ROOT)], "stacks": cluster, "ready_timeout": 60.0, **overrides}
    return KubernetesCompute(**settings)


def test_deploy_call_reattach_from_a_second_driver_resize_by_stack_update_and_destroy(cluster: FakeCluster):
    name = default_job_name("testbed.service_fns:whoami", 52)
    assert name == f"{getpass.getuser().lower()}-whoami"
    first = compute_on(cluster).distribute("pytorch", workers=2, num_proc=1)

    whoami = fn(service_fns.whoami).to(first)

    assert (first.job_name, first.last_deploy) == (name, "created")
    assert cluster.calls == [("outputs", name), ("up", name)]
    results = whoami()
    assert [r["rank"] for r in results] == [0, 1]
    assert [r["calls"] for r in results] == [1, 1]
    assert first.endpoint.url.startswith("http://127.0.0.1:"), "calls go through the local relay"
    forwards = [path for path, auth in cluster.api.requests if auth == f"Bearer {cluster.api.token}"]
    assert forwards and set(forwards) == {f"/api/v1/namespaces/research/pods/{name}-0/portforward"
                                          f"?ports={contract.AGENT_PORT}"}, cluster.api.requests
    assert fn(service_fns.rank).to(first)() == [0, 1], "another function, from another module, shares the job"

    second = compute_on(cluster).distribute("pytorch", workers=2, num_proc=1)  # the next driver run
    again = fn(service_fns.whoami).to(second)

    assert second.last_deploy == "reattached"
    assert cluster.calls[2:] == [("outputs", name)], "an unchanged job is reattached, not updated"
    later = again()
    assert [r["pid"] for r in later] == [r["pid"] for r in results], "the same pods serve the second driver"
    assert [r["calls"] for r in later] == [2, 2], "and their state survived"

    bigger = compute_on(cluster).distribute("pytorch", workers=3, num_proc=1)
    before = cluster.deployments[name]
    resized = again.to(bigger)

    assert bigger.last_deploy == "updated" and not second.running
    assert cluster.calls[3:] == [("outputs", name), ("up", name)], "a resize is a stack update, not a destroy"
    grown = resized()
    assert [r["rank"] for r in grown] == [0, 1, 2]
    assert [r["pid"] for r in grown[:2]] == [r["pid"] for r in results], "in place: the first pods kept running"
    assert [r["calls"] for r in grown[:2]] == [3, 3], "with their state"
    assert changed_inputs(before, cluster.deployments[name]) == {
        (STATEFULSET, "spec.replicas"): (2, 3),
        ("kubernetes:core/v1:ConfigMap", "data.TRAINPLANE_WORKERS"): ("2", "3"),
        ("kubernetes:core/v1:ConfigMap", "data.TRAINPLANE_QUORUM_WORKERS"): ("2", "3"),
        ("kubernetes:policy/v1:PodDisruptionBudget", "spec.minAvailable"): (1.0, 2.0),
    }, "the workload changes its replicas only (its pods read the size from the size ConfigMap)"

    job = cluster.jobs[name]
    resized.teardown()

    assert cluster.calls[-1] == ("destroy", name) and name not in cluster.stacks
    assert not bigger.running
    assert wait_until(lambda: not processes_with(job.job), timeout=20)


STATEFULSET = "kubernetes:apps/v1:StatefulSet"


def changed_inputs(before: Deployment, after: Deployment) -> dict[tuple[str, str], tuple[object, object]]:
    """``(type, dotted input path) -> (before, after)`` for every input that differs between two
    deployments of the same program (resources matched by name)."""

    def flat(value: object, prefix: str = "") -> dict[str, object]:
        if isinstance(value, dict):
            return {k: v for key, item in value.items() for k, v in flat(item, f"{prefix}{key}.").items()}
        return {prefix[:-1]: value}

    changes = {}
    for reg in before.registrations.values():
        old, new = flat(reg.inputs), flat(after.named(reg.name).inputs)
        for path in sorted(set(old) | set(new)):
            if old.get(path) != new.get(path):
                changes[(reg.type, path)] = (old.get(path), new.get(path))
    return changes


def test_a_job_whose_pods_never_answer_fails_after_the_ready_timeout_naming_the_api_servers_answer(tmp_path):
    fake = FakeCluster(tmp_path, pods_appear=False)
    try:
        compute = compute_on(fake, name="trainer", ready_timeout=1.0)
        with pytest.raises(RendezvousError) as info:
            fn(service_fns.rank).to(compute)
    finally:
        fake.close()
    message = str(info.value)
    assert message.startswith("no running service-mode job of 1 nodes x 1 processes at http://127.0.0.1:")
    assert ('port-forward to pod trainer-0:32300 in research failed: the API server refused the port-forward to '
            'pod trainer-0 in research: Handshake status 404 pods "trainer-0" not found') in message
    assert "kubectl get pods -n research -l trainplane.dev/job=trainer" in message
    assert not compute.running and fake.calls == [("outputs", "trainer"), ("up", "trainer")]


def test_a_wrong_token_in_the_stack_outputs_fails_at_once(cluster: FakeCluster):
    compute = compute_on(cluster, name="trainer")
    fn(service_fns.rank).to(compute)
    cluster.stacks["trainer"][job_program.TOKEN] = "not-the-token"
    compute.release()

    with pytest.raises(Unauthorized, match="401"):
        fn(service_fns.rank).to(compute_on(cluster, name="trainer"))


def test_a_stack_without_the_programs_outputs_is_refused(cluster: FakeCluster):
    cluster.stacks["trainer"] = {"something": "else"}
    cluster.up = lambda stack, program: {"something": "else"}  # type: ignore[method-assign]

    with pytest.raises(DeployError, match=r"stack 'trainer' has no output token, namespace, coordinator_pod, "
                                          r"agent_port, coordinator_url, spec after `pulumi up`"):
        fn(service_fns.rank).to(compute_on(cluster, name="trainer"))


def test_destroy_by_name_from_another_run_and_without_a_name(cluster: FakeCluster):
    compute_on(cluster, name="trainer").destroy()
    assert cluster.calls == [("destroy", "trainer")]
    with pytest.raises(ConfigError, match=r"^name=None: destroy\(\) of a job this process did not deploy needs its "
                                          r"name"):
        compute_on(cluster).destroy()


@pytest.mark.parametrize(("overrides", "message"), [
    ({"image": ""}, r"^image='': must be a non-empty image reference"),
    ({"memory": "lots"}, r"^memory='lots'"),
    ({"gpus": -1}, r"^gpus=-1"),
    ({"namespace": "Research"}, r"^namespace='Research'"),
    ({"pythonpath": ["relative/dir"]}, r"^pythonpath\[0\]='relative/dir': must be an absolute path"),
    ({"name": "Trainer"}, r"^name='Trainer'"),
    ({"name": "t" * 60}, r"^name='t{60}': the StatefulSet controller-revision-hash label .* shorten name to at "
                         r"most 52 characters"),
    ({"job_args": {"workers": 3}}, r"^job_args=\{'workers': 3\} is invalid: it sets workers, which "
                                   r"KubernetesCompute takes as its own arguments"),
    ({"job_args": {"gang": "volcano"}}, r"^job_args=\{'gang': 'volcano'\} is invalid: .*unexpected keyword "
                                        r"argument 'gang'; use DistributedJobArgs field names"),
    ({"job_args": {"gang_scheduler": "slurm"}}, r"^gang_scheduler='slurm'"),
    ({"kubeconfig": "/nonexistent/kubeconfig"}, r"^kubeconfig='/nonexistent/kubeconfig' is invalid: no such file"),
    ({"ready_timeout": -1}, r"^ready_timeout=-1 is invalid"),
    ({"workers": 0}, r"^workers=0 is invalid"),
])
def test_bad_arguments_are_refused_when_the_compute_is_made_naming_the_field(overrides, message: str):
    settings = {"image": IMAGE, **overrides}
    with pytest.raises(ConfigError, match=message):
        KubernetesCompute(**settings)


def test_distribute_checks_the_new_shape_at_once():
    with pytest.raises(ConfigError, match=r"^num_proc=2: a ray job runs one driver process"):
        KubernetesCompute(image=IMAGE).distribute("ray", workers=2, num_proc=2)


@pytest.mark.parametrize(("function", "user", "expected"), [
    ("train:train_model", "alice", "alice-train-model"),
    ("pkg.mod:Trainer.step", "Bob.Smith", "bob-smith-step"),
    ("driver:work", "1ops", "job-1ops-work"),
    ("driver:" + "x" * 80, "alice", "alice-" + "x" * 46),
])
def test_the_default_job_name_is_user_and_function_as_a_dns_label(function: str, user: str, expected: str):
    name = default_job_name(function, 52, user=user)
    assert name == expected
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name) and len(name) <= 52


def test_the_service_example_deploys_with_kubernetes_compute_and_says_when_the_pulumi_cli_is_missing(tmp_path: Path):
    env = project_env(PATH=str(tmp_path / "empty-bin"), TRAINPLANE_HOME=str(tmp_path / "state"))
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    result = subprocess.run([sys.executable, str(ROOT / "examples/service_digits.py"), "--image", "trainer:1",
                             "--workers", "2", "--kubeconfig", str(tmp_path / "kubeconfig")], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)

    assert result.returncode == 1, result.stderr
    user = default_job_name("digits_service_fns:train", 52)
    assert result.stderr.strip().endswith(
        f"DeployError: stack '{user}' (outputs): KubernetesCompute deploys through the Pulumi Automation API, which "
        "runs the Pulumi CLI, and no `pulumi` is on PATH: install it (https://www.pulumi.com/docs/install/: curl "
        "-fsSL https://get.pulumi.com | sh) and put it on PATH")
    assert (tmp_path / "state" / "passphrase").is_file(), "the workspace was prepared before the CLI was needed"


def test_without_a_usable_kubeconfig_nothing_is_deployed(cluster: FakeCluster, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    compute = KubernetesCompute(image=IMAGE, name="trainer", stacks=cluster)

    with pytest.raises(ConfigError, match=r"^kubeconfig=None \(none given: \$KUBECONFIG or ~/.kube/config\) with "
                                          r"context=None is not usable: .*; pass kubeconfig= the path of a kubeconfig"):
        fn(service_fns.rank).to(compute)

    assert cluster.calls == [], "the stack was not touched"
