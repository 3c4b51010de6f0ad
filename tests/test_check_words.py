"""One rule, one wording: the same check refused by each front end (the launcher's command line, the
agent's environment, a ``DistributedJobArgs`` at preview, a cluster or add-on argument) says the same
problem and fix, each in the front end's names for the settings."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from components.addons.device_plugin import NvidiaDevicePluginArgs
from components.addons.kueue import KNOWN_FRAMEWORKS, ClusterQueueArgs, KueueArgs, LocalQueueArgs, ResourceFlavorArgs
from components.addons.trainer import TrainerV2Args
from components.addons.training_operator import OPERATOR_GANG_SCHEDULERS, TrainingOperatorArgs
from components.cluster.eks import EksGpuClusterArgs, GpuNodeGroupArgs
from components.cluster.existing import ExistingClusterArgs
from components.cluster.kind import KindClusterArgs
from components.errors import ArgumentError, InvalidJobArgs, StackConfigError
from components.stack.config import CLUSTER_KEYS, parse_cluster
from runtime.agent import contract
from runtime.agent.errors import ConfigError, ParseError
from runtime.agent.spec.agent_settings import AgentSettings
from runtime.agent.spec.job import DISTRIBUTIONS, SETTINGS, JobSpec
from runtime.agent.spec.ports import known_port, port_block
from runtime.local.launch import SHUTDOWN_TIMEOUT_ENV, build_parser, validate
from tests.components.componenttest import job_args

pytestmark = pytest.mark.unit

PROG = "python -m runtime launch"
HELP = " (see --help)"

NODE_ENV = {contract.NODE_RANK_SETTING: "0", contract.COORDINATOR_HOST: "127.0.0.1", contract.TOKEN: "t",
            contract.JOB_NAME: "job", contract.ENTRYPOINT: '["train.py"]'}


def launcher_error(argv: list[str]) -> str:
    """The launcher's one-line parse error (exit 2) for ``argv``."""
    parser = build_parser()
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), pytest.raises(SystemExit) as exit_info:
        validate(parser, parser.parse_args(argv))
    assert exit_info.value.code == 2
    return stderr.getvalue().strip().splitlines()[-1]


def agent_error(env: dict[str, str]) -> str:
    """The agent's refusal of its environment (it exits 2 with this message)."""
    with pytest.raises(ConfigError) as info:
        AgentSettings.from_env({**NODE_ENV, **env})
    return str(info.value)


def parts(error: ArgumentError) -> tuple[str, str]:
    """A component error's ``(problem, fix)``, as the check answered it."""
    return error.problem, error.fix


def test_a_port_block_past_65535_is_worded_alike_by_the_launcher_and_the_job_args(tmp_path: Path):
    script = tmp_path / "train.py"
    script.write_text("")
    line = launcher_error(["--nnodes", "1", "--nproc-per-node", "2", "--master-port", "65500", str(script)])
    with pytest.raises(InvalidJobArgs) as info:
        job_args(workers=1, num_proc=2, master_port=65500, agent_port=8080)
    problem = "the job uses 66 ports from it (rendezvous, JAX, TensorFlow), up to 65565, beyond the last TCP port"
    assert (info.value.field, info.value.problem, info.value.fix) == (
        "master_port", problem, "use a master_port of at most 65470")
    assert (f"error: --master-port: {problem} (got 65500); use a --master-port of at most 65470, or 0 for a free "
            "one") in line


def test_a_bad_tcp_port_is_worded_alike_by_the_agent_and_the_job_args():
    with pytest.raises(InvalidJobArgs) as info:
        job_args(agent_port=70000)
    assert (info.value.problem, info.value.fix) == ("must be from 1 to 65535", "use a TCP port from 1 to 65535")
    assert agent_error({contract.AGENT_PORT_SETTING: "70000"}) == (
        f"{contract.AGENT_PORT_SETTING}=70000 is invalid: must be from 1 to 65535; use a TCP port from 1 to 65535")


def test_a_base_port_of_0_is_worded_alike_by_the_agent_and_the_job_args():
    with pytest.raises(InvalidJobArgs) as info:
        job_args(master_port=0)
    problem = ("0 picks a free port when a job starts on one machine, and every node must know node 0's port in "
               "advance")
    assert parts(info.value) == (problem, "use a TCP port from 1 to 65535")
    assert agent_error({contract.MASTER_PORT: "0"}) == (
        f"{contract.MASTER_PORT}=0 is invalid: {problem}; use a TCP port from 1 to 65535")


def test_the_launchers_variable_is_worded_as_the_agents_variables(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(SHUTDOWN_TIMEOUT_ENV, "soon")
    words = "is invalid: must be a number of seconds; write it as a number, e.g. 30 or 2.5"
    assert launcher_error(["train.py"]) == f"{PROG}: error: {SHUTDOWN_TIMEOUT_ENV}='soon' {words}{HELP}"
    assert agent_error({contract.GRACE_PERIOD: "soon"}) == f"{contract.GRACE_PERIOD}='soon' {words}"


def test_a_spec_rule_is_worded_alike_by_the_launcher_the_agent_and_the_job_args(tmp_path: Path):
    script = tmp_path / "train.py"
    script.write_text("")
    line = launcher_error(["--nnodes", "2", "--quorum-workers", "3", str(script)])
    with pytest.raises(InvalidJobArgs) as info:
        job_args(workers=2, quorum_workers=3)
    agent = agent_error({contract.WORKERS: "2", contract.QUORUM_WORKERS: "3"})
    assert (info.value.problem, info.value.fix) == (
        "must be from 1 to workers (2)", "use a quorum from 1 to the number of nodes (2)")
    assert line == (f"{PROG}: error: --quorum-workers: must be from 1 to --nnodes (2) (got 3); use a quorum from 1 to "
                    f"the number of nodes (2){HELP}")
    assert agent == (f"{contract.QUORUM_WORKERS}=3 is invalid: must be from 1 to {contract.WORKERS} (2); use a quorum "
                     "from 1 to the number of nodes (2)")


def test_a_single_controller_rule_is_worded_alike_by_the_launcher_the_agent_and_the_job_args():
    line = launcher_error(["--nnodes", "2", "--distribution", "ray", "--num-proc", "2", "train.py"])
    with pytest.raises(InvalidJobArgs) as info:
        job_args(distribution="ray", num_proc=2)
    agent = agent_error({contract.DISTRIBUTION: "ray", contract.NUM_PROC: "2"})
    problem = "a ray job runs one driver process, on node 0, and ray's own workers on every node"
    assert (info.value.problem, info.value.fix) == (problem, "set num_proc to 1")
    assert line == f"{PROG}: error: --num-proc: {problem} (got 2); set --num-proc to 1{HELP}"
    assert agent == f"{contract.NUM_PROC}=2 is invalid: {problem}; set {contract.NUM_PROC} to 1"


def test_a_rule_about_two_settings_is_worded_alike_by_the_launcher_the_agent_and_the_job_args():
    line = launcher_error(["--nnodes", "2", "--distribution", "monarch", "--min-workers", "1", "train.py"])
    with pytest.raises(InvalidJobArgs) as info:
        job_args(distribution="monarch", num_proc=1, min_workers=1, max_workers=2)
    agent = agent_error({contract.DISTRIBUTION: "monarch", contract.MIN_WORKERS: "1", contract.MAX_WORKERS: "2"})
    problem = "a monarch job cannot be elastic (its head is node 0)"
    assert (info.value.field, info.value.problem, info.value.fix) == (
        "min_workers", problem, "unset min_workers and max_workers")
    assert line == f"{PROG}: error: --min-workers/--max-workers: {problem}; unset --min-workers and --max-workers{HELP}"
    assert agent == (f"{contract.MIN_WORKERS}=1 is invalid: {problem}; unset {contract.MIN_WORKERS} and "
                     f"{contract.MAX_WORKERS}")


def test_a_rule_whose_problem_says_the_value_is_worded_alike_by_the_launcher_the_agent_and_the_job_args():
    line = launcher_error(["--daemon-arg=--num-cpus=1", "train.py"])
    with pytest.raises(InvalidJobArgs) as info:
        job_args(daemon_args=["--num-cpus=1"])
    agent = agent_error({contract.DAEMON_ARGS: '["--num-cpus=1"]'})
    assert (info.value.problem, info.value.fix) == (
        "applies to distribution ray only: the arguments go to `ray start` (got distribution spmd)",
        "unset daemon_args, or use distribution ray")
    assert line == (f"{PROG}: error: --daemon-arg: applies to --distribution ray only: the arguments go to `ray start` "
                    f"(got --distribution spmd); unset --daemon-arg, or use --distribution ray{HELP}")
    dist = contract.DISTRIBUTION
    assert agent == (f"{contract.DAEMON_ARGS}=['--num-cpus=1'] is invalid: applies to {dist} ray only: the arguments "
                     f"go to `ray start` (got {dist} spmd); unset {contract.DAEMON_ARGS}, or use {dist} ray")


def test_an_empty_job_name_is_worded_alike_by_the_launcher_and_the_agent():
    problem, fix = "must be non-empty text", "name the job, e.g. digits"
    assert launcher_error(["--job-name", "", "train.py"]) == (
        f"{PROG}: error: --job-name: {problem} (got ''); {fix}{HELP}")
    assert agent_error({contract.JOB_NAME: ""}) == f"{contract.JOB_NAME}='' is invalid: {problem}; {fix}"


def test_a_check_that_parses_text_is_worded_alike_by_the_launcher_and_the_agent():
    problem, fix = "'NOPE' is not a signal name", "use signal names, e.g. SIGTERM,SIGUSR1"
    assert launcher_error(["--signals-to-handle", "SIGTERM,NOPE", "train.py"]) == (
        f"{PROG}: error: --signals-to-handle: {problem} (got 'SIGTERM,NOPE'); {fix}{HELP}")
    assert agent_error({contract.TORCHELASTIC_SIGNALS_TO_HANDLE: "SIGTERM,NOPE"}) == (
        f"{contract.TORCHELASTIC_SIGNALS_TO_HANDLE}='SIGTERM,NOPE' is invalid: {problem}; {fix}")


FIX_VERBS = ("use", "unset", "set", "name", "give", "write")
"""How the spec's fixes begin: each says what to do."""
UNLIKELY_VALUES = (None, True, -1, 0, 1.5, float("nan"), 70000, "", " ", "NOPE", ["x", 1], ["", "a"], ())
UNREADABLE_TEXTS = ("x", "-", "0,a", "9", "[1]", "{", "0:9", '"x"')


def every_spec_answer() -> list[tuple[str, str]]:
    """Every ``(problem, fix)`` the job spec words: each setting's check of values it refuses, each codec's
    refusal of text it cannot read, each rule between settings (worded whether it holds or not) for every
    distribution, elastic or not, the port block's and the base port's where every node must know it."""
    answers = [found for declared in SETTINGS.values() for value in UNLIKELY_VALUES
               if (found := declared.problem(value)) is not None]
    for codec in {declared.codec for declared in SETTINGS.values()}:
        for text in UNREADABLE_TEXTS:
            with contextlib.suppress(ParseError):
                codec.parse(text)
                continue
            with pytest.raises(ParseError) as info:
                codec.parse(text)
            answers.append((info.value.problem, info.value.fix))
    specs = [JobSpec(entrypoint=("x.py",), distribution=d) for d in DISTRIBUTIONS]
    specs.append(JobSpec(entrypoint=("x.py",), workers=3, quorum_workers=2, min_workers=2, max_workers=4))
    answers += [(rule.problem, rule.fix) for spec in specs for rule in spec.rules()]
    answers += [found for free in (False, True) if (found := port_block(65500, 2, free)) is not None]
    answers += [found for value in UNLIKELY_VALUES if (found := known_port(value)) is not None]
    return answers


def test_every_spec_problem_is_the_problem_alone_and_every_fix_the_fix_alone():
    answers = every_spec_answer()
    assert len(answers) > 60
    for problem, fix in answers:
        assert "; " not in problem and "(use " not in problem and fix not in problem, (problem, fix)
        assert problem.split()[0] not in FIX_VERBS, (problem, fix)
        assert "; " not in fix and fix.split()[0] in FIX_VERBS, (problem, fix)


def test_a_whole_number_is_worded_alike_by_the_job_args_and_the_cluster_args():
    with pytest.raises(InvalidJobArgs) as job:
        job_args(gpus=-1)
    with pytest.raises(ArgumentError) as cluster:
        KindClusterArgs(workers=-1)
    assert parts(job.value) == parts(cluster.value) == ("must be 0 or more", "use a whole number >= 0")


def test_a_choice_is_worded_alike_by_the_spec_the_job_args_and_the_add_on_args():
    with pytest.raises(InvalidJobArgs) as spec_rule:
        job_args(mode="interactive")
    with pytest.raises(InvalidJobArgs) as job_rule:
        job_args(image_pull_policy="always")
    assert parts(spec_rule.value) == ("must be one of batch, service", "use one of batch, service")
    policies = "Always, IfNotPresent, Never"
    assert parts(job_rule.value) == (f"must be one of {policies}", f"use one of {policies}")
    with pytest.raises(ArgumentError) as add_on_rule:
        TrainingOperatorArgs.for_gang_scheduler("kube-batch")
    listed = ", ".join(OPERATOR_GANG_SCHEDULERS)
    assert parts(add_on_rule.value) == (f"must be one of {listed}", f"use one of {listed}")


def test_a_flag_is_worded_alike_by_the_job_args_and_the_add_on_and_cluster_args():
    with pytest.raises(InvalidJobArgs) as job_rule:
        job_args(monitor_members="yes")
    with pytest.raises(ArgumentError) as add_on_rule:
        KueueArgs(block_admission="yes")  # type: ignore[arg-type]
    with pytest.raises(ArgumentError) as cluster_rule:
        ExistingClusterArgs(kubeconfig="k", gpu_nodes="yes")  # type: ignore[arg-type]
    assert parts(job_rule.value) == parts(add_on_rule.value) == parts(cluster_rule.value) == (
        "must be true or false", "use true or false")


def test_a_label_is_worded_alike_by_the_job_args_and_the_add_on_args():
    with pytest.raises(InvalidJobArgs) as job_rule:
        job_args(labels={"team": "-ml"})
    with pytest.raises(ArgumentError) as add_on_rule:
        ResourceFlavorArgs(name="gpu", node_labels={"team": "-ml"})
    fix = "use at most 63 letters, digits, '-', '_' or '.', alphanumeric at both ends"
    assert (job_rule.value.field, add_on_rule.value.field) == ("labels['team']", "node_labels['team']")
    assert parts(job_rule.value) == parts(add_on_rule.value) == ("not a label value", fix)


def test_a_repeated_name_is_worded_alike_by_the_add_on_and_cluster_args():
    with pytest.raises(ArgumentError) as add_on_rule:
        KueueArgs(flavors=[ResourceFlavorArgs(name="gpu"), ResourceFlavorArgs(name="gpu")])
    group = GpuNodeGroupArgs(name="gpu", instance_types=["g5.xlarge"])
    with pytest.raises(ArgumentError) as cluster_rule:
        EksGpuClusterArgs(availability_zones=["a", "b"], gpu_node_groups=[group, group])
    assert parts(add_on_rule.value) == parts(cluster_rule.value) == ("repeats gpu", "give each one its own name")
    with pytest.raises(ArgumentError) as listed_twice:
        TrainerV2Args(gang_schedulers=["volcano", "volcano"])
    assert parts(listed_twice.value) == ("repeats volcano", "list each one once")


def test_a_reference_to_something_undefined_is_worded_alike_by_the_add_on_and_cluster_args():
    with pytest.raises(ArgumentError) as add_on_rule:
        KueueArgs(flavors=[ResourceFlavorArgs(name="gpu")],
                  cluster_queues=[ClusterQueueArgs(name="main", quotas={"gpu": {"cpu": "1"}})],
                  local_queues=[LocalQueueArgs(name="q", namespace="ml", cluster_queue="other")])
    with pytest.raises(ArgumentError) as cluster_rule:
        ExistingClusterArgs(storage_classes={"efs": ["ReadWriteMany"]}, default_storage_class="gp3")
    assert parts(add_on_rule.value) == ("names no defined cluster queue", "use one of main")
    assert parts(cluster_rule.value) == ("names no defined storage class", "use one of efs")


def test_a_range_is_worded_alike_by_the_agent_and_the_cluster_args():
    with pytest.raises(ArgumentError) as cluster_rule:
        GpuNodeGroupArgs(name="gpu", instance_types=["g5.xlarge"], min_size=1, max_size=3, desired_size=4)
    assert parts(cluster_rule.value) == ("must be from 1 to 3", "use min_size (1) <= desired_size <= max_size (3)")
    assert agent_error({contract.WORKERS: "4", contract.NODE_RANK_SETTING: "4"}) == (
        f"{contract.NODE_RANK_SETTING}=4 is invalid: must be from 0 to 3; use a node rank from 0 to 3")


def test_an_optional_flag_is_worded_as_every_flag():
    with pytest.raises(ArgumentError) as optional_flag:
        NvidiaDevicePluginArgs(mofed_enabled="no")  # type: ignore[arg-type]
    assert parts(optional_flag.value) == ("must be true or false", "use true or false")
    assert NvidiaDevicePluginArgs(mofed_enabled=None).mofed_enabled is None


def test_a_kueue_framework_is_a_choice_worded_as_every_choice():
    with pytest.raises(ArgumentError) as info:
        KueueArgs(frameworks=["batch/job", "kubeflow.org/pytorchjobs"])
    listed = ", ".join(KNOWN_FRAMEWORKS)
    assert info.value.field == "frameworks[1]"
    assert parts(info.value) == (f"must be one of {listed}", f"use one of {listed}")


def test_the_launchers_own_checks_say_the_problem_the_value_and_the_fix(tmp_path: Path):
    missing = str(tmp_path / "missing.py")
    assert launcher_error([missing]) == (
        f"{PROG}: error: SCRIPT: no such file (got {missing!r}); use -m for a module, --no-python for a command{HELP}")
    assert launcher_error(["--mode", "service", "--pythonpath", missing]) == (
        f"{PROG}: error: --pythonpath: no such directory (got {missing!r}); name an existing directory{HELP}")
    assert launcher_error(["--no-python", "-m", "pkg.train"]) == (
        f"{PROG}: error: --no-python: runs a command, not a module; drop -m or --no-python{HELP}")


def test_a_stack_configs_choice_is_worded_as_every_choice():
    with pytest.raises(StackConfigError) as stack_rule:
        parse_cluster({"clusterKind": "gke"})
    listed = ", ".join(CLUSTER_KEYS)
    assert str(stack_rule.value) == f"trainplane:clusterKind = 'gke': must be one of {listed}; use one of {listed}"


def test_text_a_setting_cannot_read_is_worded_alike_by_the_launcher_and_the_agent():
    problem, fix = "must be a comma-separated list of local ranks", "use e.g. 0,1,2"
    assert launcher_error(["--local-ranks-filter", "0,a", "train.py"]) == (
        f"{PROG}: error: argument --local-ranks-filter: {problem} (got '0,a'); {fix}{HELP}")
    assert agent_error({contract.LOCAL_RANKS_FILTER: "0,a"}) == (
        f"{contract.LOCAL_RANKS_FILTER}='0,a' is invalid: {problem}; {fix}")
    assert agent_error({contract.WORKERS: "two"}) == (
        f"{contract.WORKERS}='two' is invalid: must be a whole number; write it in digits, e.g. 4")


def test_the_eks_clusters_cross_field_rules_say_the_problem_and_the_fix():
    with pytest.raises(ArgumentError) as zones:
        EksGpuClusterArgs(availability_zones=["us-west-2a"])
    assert str(zones.value) == ("availability_zones=('us-west-2a',): names fewer than 2 zones; list 2 or more zones "
                                "for the created VPC, or give vpc_id and subnets")
    with pytest.raises(ArgumentError) as subnets:
        EksGpuClusterArgs(availability_zones=["us-west-2a", "us-west-2b"], public_subnet_ids=["subnet-a"])
    assert str(subnets.value) == ("vpc_id=None: is unset, and subnet ids are given; set vpc_id too when giving "
                                  "subnet ids")
