"""One rule, one wording: the same check refused by each front end of a job (the launcher's command line,
the agent's environment, a ``DistributedJobArgs`` at preview) says the same problem and fix, each in the
front end's names for the settings; tests/test_check_words_components.py has the cluster, add-on and stack
config args'."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from components.errors import InvalidJobArgs
from runtime.agent import contract
from runtime.agent.errors import HttpError, ParseError
from runtime.agent.spec.job import DISTRIBUTIONS, MODES, SETTINGS, JobSpec
from runtime.agent.spec.ports import base_port, known_port, port_block
from runtime.agent.spec.setting import INT, SECONDS, TCP_PORT_FIX
from runtime.local import hosts
from runtime.local.launch import SHUTDOWN_TIMEOUT_ENV
from tests.checkwords import HELP, PROG, agent_error, assert_worded_alike, launcher_error, parts
from tests.components.componenttest import job_args

pytestmark = pytest.mark.unit


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
    assert_worded_alike(["--job-name", "", "train.py"], "--job-name", contract.JOB_NAME, "",
                        "must be non-empty text", "name the job, e.g. digits")


def test_a_check_that_parses_text_is_worded_alike_by_the_launcher_and_the_agent():
    assert_worded_alike(["--signals-to-handle", "SIGTERM,NOPE", "train.py"], "--signals-to-handle",
                        contract.TORCHELASTIC_SIGNALS_TO_HANDLE, "SIGTERM,NOPE", "'NOPE' is not a signal name",
                        "use signal names, e.g. SIGTERM,SIGUSR1")


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


def test_the_launchers_own_checks_say_the_problem_the_value_and_the_fix(tmp_path: Path):
    missing = str(tmp_path / "missing.py")
    assert launcher_error([missing]) == (
        f"{PROG}: error: SCRIPT: no such file (got {missing!r}); use -m for a module, --no-python for a command{HELP}")
    assert launcher_error(["--mode", "service", "--pythonpath", missing]) == (
        f"{PROG}: error: --pythonpath: no such directory (got {missing!r}); name an existing directory{HELP}")
    assert launcher_error(["--no-python", "-m", "pkg.train"]) == (
        f"{PROG}: error: --no-python: runs a command, not a module; drop -m or --no-python{HELP}")


def test_text_a_setting_cannot_read_is_worded_alike_by_the_launcher_and_the_agent():
    assert_worded_alike(["--local-ranks-filter", "0,a", "train.py"], "--local-ranks-filter",
                        contract.LOCAL_RANKS_FILTER, "0,a", "must be a comma-separated list of local ranks",
                        "use e.g. 0,1,2")
    assert agent_error({contract.WORKERS: "two"}) == (
        f"{contract.WORKERS}='two' is invalid: must be a whole number; write it in digits, e.g. 4")


@pytest.mark.parametrize(("flag", "env", "text", "choices"), [
    ("--mode", contract.MODE, "rpc", MODES), ("--distribution", contract.DISTRIBUTION, "mpi", DISTRIBUTIONS)])
def test_a_value_outside_a_settings_choices_is_worded_alike_by_the_launcher_and_the_agent(
        flag: str, env: str, text: str, choices: tuple[str, ...]):
    listed = ", ".join(choices)
    assert_worded_alike([flag, text, "train.py"], flag, env, text, f"must be one of {listed}", f"use one of {listed}")


NUMBERS = {INT: "two", SECONDS: "soon"}
"""A text each number codec cannot read."""
NUMERIC_FLAGS = [(name, declared.flags[-1], declared.env, NUMBERS[declared.codec])
                 for name, declared in SETTINGS.items()
                 if declared.flags and declared.codec in NUMBERS and name not in ("workers", "num_proc")]
"""Every setting the launcher takes as a plain number: its last spelling (torchrun's, where it has one), its
variable and a text it cannot read."""


@pytest.mark.parametrize(("name", "flag", "env", "text"), NUMERIC_FLAGS, ids=[row[0] for row in NUMERIC_FLAGS])
def test_a_number_a_flag_cannot_read_is_worded_as_the_agent_words_its_variable(name: str, flag: str, env: str,
                                                                                text: str):
    with pytest.raises(ParseError) as codec:
        SETTINGS[name].codec.parse(text)
    assert_worded_alike([flag, text, "train.py"], flag, env, text, codec.value.problem, codec.value.fix)


def test_the_node_rank_a_flag_cannot_read_is_worded_as_the_agent_words_its_variable():
    problem, fix = "must be a whole number", "write it in digits, e.g. 4"
    assert_worded_alike(["--node_rank", "one", "train.py"], "--node_rank", contract.NODE_RANK_SETTING, "one",
                        problem, fix)
    assert launcher_error(["--monitor-interval", "soon", "train.py"]) == (
        f"{PROG}: error: --monitor-interval: must be a number of seconds (got 'soon'); write it as a number, e.g. "
        f"30 or 2.5{HELP}")


def test_the_node_and_process_counts_say_the_numbers_words_and_their_other_forms():
    with pytest.raises(ParseError) as number:
        INT.parse("two")
    assert (number.value.problem, number.value.fix) == ("must be a whole number", "write it in digits, e.g. 4")
    for text in ("two", "1:x", "x:2"):
        assert launcher_error(["--nnodes", text, "train.py"]) == (
            f"{PROG}: error: --nnodes: must be a whole number, or MIN:MAX (got {text!r}); write it in digits, e.g. "
            f"4, or MIN:MAX, e.g. 2:4{HELP}")
    assert launcher_error(["--nproc_per_node", "two", "train.py"]) == (
        f"{PROG}: error: --nproc_per_node: must be a whole number, or auto, cpu, gpu or xpu (got 'two'); write it in "
        f"digits, e.g. 4, or use auto, cpu, gpu or xpu{HELP}")


@pytest.mark.parametrize(("word", "torch", "problem"), [
    ("gpu", SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: False)), "no CUDA device is visible"),
    ("xpu", SimpleNamespace(xpu=SimpleNamespace(is_available=lambda: False)), "no XPU device is visible"),
    ("gpu", None, "torch is not installed to count the devices"),
])
def test_a_device_count_with_no_device_names_the_flag_the_problem_and_the_fix(
        monkeypatch: pytest.MonkeyPatch, word: str, torch: object, problem: str):
    """torch as it is on a machine without the device (or without torch): tests/runtime/local/test_launch_cli.py
    runs the launcher on this machine with CUDA hidden."""
    monkeypatch.setitem(sys.modules, "torch", torch)
    assert launcher_error(["--nproc-per-node", word, "train.py"]) == (
        f"{PROG}: error: --nproc-per-node: {problem} (got {word!r}); use a number of processes, auto or cpu{HELP}")


def test_a_node_rank_is_worded_alike_by_the_agent_the_per_node_launcher_and_the_join():
    problem, fix = "must be from 0 to 1", "use a node rank from 0 to 1"
    assert agent_error({contract.WORKERS: "2", contract.NODE_RANK_SETTING: "2"}) == (
        f"{contract.NODE_RANK_SETTING}=2 is invalid: {problem}; {fix}")
    assert launcher_error(["--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:29400", "--node_rank", "2", "-m", "t"]) == (
        f"{PROG}: error: --node_rank: {problem} (got 2); {fix}{HELP}")
    with pytest.raises(HttpError) as join:
        hosts.JoinService("t", "job", 2, 29500).join("key", 2, 2, "10.0.0.2", 1)
    assert str(join.value) == f"--node-rank=2 is invalid: {problem}; {fix}"


def test_an_endpoints_port_and_form_are_worded_alike_by_the_launcher_and_the_agent():
    endpoint = ["--nnodes", "2", "-m", "--rdzv-endpoint"]  # -m: a module, which the launcher does not look for
    assert launcher_error([*endpoint, "127.0.0.1:70000", "train"]) == (
        f"{PROG}: error: --rdzv-endpoint: its port must be from 1 to 65535 (got '127.0.0.1:70000'); {TCP_PORT_FIX}"
        f"{HELP}")
    assert agent_error({contract.COORDINATOR_HOST: "127.0.0.1:70000"}) == (
        f"{contract.COORDINATOR_HOST}=70000 is invalid: must be from 1 to 65535; {TCP_PORT_FIX}")
    fix = "use host, host:port, an IPv6 address, or [IPv6 address]:port"
    assert launcher_error([*endpoint, ":29400", "train"]) == (
        f"{PROG}: error: --rdzv-endpoint: names no host (got ':29400'); {fix}{HELP}")
    assert agent_error({contract.COORDINATOR_HOST: ":29400"}) == (
        f"{contract.COORDINATOR_HOST}=':29400' is invalid: names no host; {fix}")


def test_a_base_port_is_refused_alike_where_every_node_must_know_it_and_only_one_machine_offers_0():
    with pytest.raises(InvalidJobArgs) as info:
        job_args(master_port=70000)
    assert parts(info.value) == ("must be from 1 to 65535", TCP_PORT_FIX)
    assert agent_error({contract.MASTER_PORT: "70000"}) == (
        f"{contract.MASTER_PORT}=70000 is invalid: must be from 1 to 65535; {TCP_PORT_FIX}")
    assert launcher_error(["--master-port", "70000", "train.py"]) == (
        f"{PROG}: error: --master-port: must be from 0 to 65535 (got 70000); {TCP_PORT_FIX}, or 0 for a free one{HELP}")
    for value in UNLIKELY_VALUES:
        known = known_port(value)
        assert known is None or "0 for a free" not in known[1], (value, known)
        free = base_port(free=True)(value)
        assert (free is None) == (known is None or value == 0), (value, free)


def test_the_elastic_bounds_typed_as_nnodes_min_max_are_named_by_nnodes():
    assert launcher_error(["--nnodes", "1:2", "--distribution", "ray", "train.py"]) == (
        f"{PROG}: error: --nnodes: a ray job cannot be elastic (its head is node 0) (got '1:2'); give --nnodes one "
        f"number, e.g. --nnodes 2{HELP}")
    assert launcher_error(["--nnodes", "3:4", "--quorum-workers", "2", "train.py"]) == (
        f"{PROG}: error: --quorum-workers: the world would form with fewer nodes than --nnodes MIN (3), the fewest it "
        f"may run with (got 2); use a quorum of at least 3, or lower --nnodes MIN{HELP}")
