"""The pure rules behind framework parity: torchrun's worker environment, signals and output
streams, the error file torch's ``@record`` writes, TF_CONFIG ports per machine, Ray's joined nodes."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from torch.distributed.elastic.multiprocessing.errors.error_handler import (
    ErrorHandler,  # imported at collection: torch's first import runs ldconfig, a process this unit tier refuses
)

from runtime.agent.errors import ConfigError, ParseError
from runtime.agent.execution import errorfile, jaxcluster, raynodes, torchrun
from runtime.agent.execution.environment import host_of, process_env
from runtime.agent.spec import streams
from runtime.agent.spec.agent_settings import AgentSettings
from runtime.agent.spec.signals import DEFAULT_SIGNALS, STOP_SIGNALS, parse_signals
from runtime.agent.spec.signals import handled as handled_signals
from runtime.agent.world import Node, World
from testbed.settings import agent_settings

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("inherited", "local_world_size", "expected"), [
    ({}, 2, "1"), ({}, 1, None), ({"OMP_NUM_THREADS": "4"}, 2, None), ({"OMP_NUM_THREADS": ""}, 8, None),
])
def test_omp_num_threads_follows_torchruns_rule(inherited: dict, local_world_size: int, expected: object):
    """torch 2.13.0 ``torch/distributed/run.py`` ``config_from_args``: set to 1 only when unset and
    ``nproc_per_node > 1``."""
    assert torchrun.omp_num_threads(inherited, local_world_size) == expected
    env = torchrun.worker_env(inherited, 0, local_world_size, DEFAULT_SIGNALS, "/e.json")
    assert env.get("OMP_NUM_THREADS") == expected


def test_worker_env_keeps_an_inherited_nccl_setting_and_defaults_it_to_1():
    assert torchrun.worker_env({}, 0, 1, "SIGTERM", "/e")["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
    env = torchrun.worker_env({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}, 0, 1, "SIGTERM", "/e")
    assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3" and env["TORCHELASTIC_USE_AGENT_STORE"] == "False"


@pytest.mark.parametrize(("visible", "local_rank", "device"), [(None, 1, "1"), ("4,5", 1, "5"), ("7", 0, "7")])
def test_virtual_local_rank_gives_each_process_one_gpu_as_device_0(visible: object, local_rank: int, device: str):
    """torch 2.13.0 ``local_elastic_agent.py`` ``_set_local_rank_env``."""
    inherited = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    env = torchrun.worker_env(inherited, local_rank, 2, "SIGTERM", "/e", virtual_local_rank=True)
    assert (env["LOCAL_RANK"], env["CUDA_VISIBLE_DEVICES"]) == ("0", device)
    with pytest.raises(ValueError, match="local rank 1 has no GPU of its own in CUDA_VISIBLE_DEVICES=7"):
        torchrun.worker_env({"CUDA_VISIBLE_DEVICES": "7"}, 1, 2, "SIGTERM", "/e", virtual_local_rank=True)


def test_signals_parse_as_torchrun_names_them_and_usr_signals_are_always_caught():
    assert parse_signals(DEFAULT_SIGNALS) == (signal.SIGTERM, signal.SIGINT, signal.SIGHUP,
                                                                 signal.SIGQUIT)
    assert parse_signals(" SIGUSR1 ,SIGUSR1") == (signal.SIGUSR1,)
    for bad in ("SIGNOPE", "TERM", "SIGTERM,,SIGINT"):
        with pytest.raises(ValueError, match="is not a signal name"):
            parse_signals(bad)
    caught = handled_signals((signal.SIGHUP,))
    assert set(caught) == {signal.SIGHUP, signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2}
    assert signal.SIGUSR1 not in STOP_SIGNALS and signal.SIGHUP in STOP_SIGNALS


@pytest.mark.parametrize(("text", "choice"), [
    ("3", streams.StdChoice(3)), ("0", streams.StdChoice(0)), ("0:1,1:2", streams.StdChoice(0, ((0, 1), (1, 2)))),
])
def test_std_values_parse_as_torchruns_std_from_str(text: str, choice: streams.StdChoice):
    assert streams.parse_std(text) == choice
    assert streams.parse_std(choice.encode()) == choice


FORM = "must be N or LOCAL_RANK:N,... with N from 0 to 3"


@pytest.mark.parametrize(("bad", "problem"), [
    ("4", "'4' is not a stream choice"), ("x", FORM), ("0:4", "'4' is not a stream choice"), ("a:1", FORM),
    ("0:1,", FORM), ("-1", FORM),
])
def test_bad_std_values_are_refused_saying_what_is_wrong(bad: str, problem: str):
    with pytest.raises(ParseError) as info:
        streams.parse_std(bad)
    assert info.value.problem == problem and info.value.fix.startswith("use ")


def test_stream_plans_follow_torchruns_reify():
    """torch 2.13.0 ``DefaultLogsSpecs.reify``: redirected streams go to files only, teed ones to
    both, ranks outside the filter to files only (and nowhere if neither redirected nor teed)."""
    chosen = streams.Streams(redirects=streams.parse_std("0:3"), tee=streams.parse_std("1:1"),
                             local_ranks=frozenset({0, 1}))
    plan = {(r, s): (p.console, p.file) for r in range(3) for s in (streams.OUT, streams.ERR)
            for p in [chosen.plan(r, s)]}
    assert plan == {(0, 1): (False, True), (0, 2): (False, True), (1, 1): (True, True), (1, 2): (True, False),
                    (2, 1): (False, False), (2, 2): (False, False)}
    assert chosen.writes_files and not streams.Streams().writes_files
    assert not streams.Streams(redirects=streams.parse_std("0:0")).writes_files


def test_filters_split_on_commas_with_a_double_comma_for_one():
    assert streams.parse_filters("loss,,acc,step") == ("loss,acc", "step")
    assert streams.parse_ranks("") is None and streams.parse_ranks("0,2") == frozenset({0, 2})


def test_the_error_file_written_by_torchs_own_error_handler_is_read_back(tmp_path: Path, monkeypatch):
    path = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(path))

    def fail() -> None:
        raise KeyError("missing shard")

    try:
        fail()
    except KeyError as exc:
        ErrorHandler().record_exception(exc)  # what @record calls
    recorded = errorfile.read(str(path))
    assert recorded is not None
    assert recorded.message == "KeyError: 'missing shard'"
    assert (recorded.file, recorded.line) == (__file__, fail.__code__.co_firstlineno + 1)
    assert recorded.describe() == f"KeyError: 'missing shard' (raised at {__file__}, line {recorded.line})"
    assert recorded.traceback[-1] == "KeyError: 'missing shard'"


@pytest.mark.parametrize("content", ["", "{", "[]", '{"message": 3}', '{"other": 1}'])
def test_an_unreadable_error_file_leaves_the_stderr_tail_to_report(tmp_path: Path, content: str):
    path = tmp_path / "error.json"
    path.write_text(content)
    assert errorfile.read(str(path)) is None
    assert errorfile.read(str(tmp_path / "none.json")) is None


def test_an_old_style_string_message_is_taken_as_is():
    assert errorfile.parse({"message": "RuntimeError: x", "timestamp": 1}) == errorfile.RecordedError("RuntimeError: x")


def _world(addrs: tuple[str, ...], num_proc: int = 2) -> World:
    return World("j", 1, 0, 0, tuple(Node(i, a, 32300, num_proc) for i, a in enumerate(addrs)), 29500, "tensorflow")


def test_tf_config_ports_are_unique_on_a_machine_shared_by_loopback_nodes():
    """TensorFlow's gRPC server binds ``0.0.0.0:port`` whatever its entry's address, so 127.0.0.2:P
    and 127.0.0.3:P collide on one machine."""
    workers = json.loads(process_env(_world(("127.0.0.2", "127.0.0.3")), 0, 0)["TF_CONFIG"])["cluster"]["worker"]
    assert workers == ["127.0.0.2:29564", "127.0.0.2:29565", "127.0.0.3:29566", "127.0.0.3:29567"]
    pods = json.loads(process_env(_world(("10.0.0.1", "fd00::2")), 0, 0)["TF_CONFIG"])["cluster"]["worker"]
    assert pods == ["10.0.0.1:29564", "10.0.0.1:29565", "[fd00::2]:29564", "[fd00::2]:29565"]
    assert {host_of(a) for a in ("127.0.0.1", "127.9.0.3", "::1", "localhost")} == {"loopback"}


def test_role_variables_describe_the_one_role():
    env = process_env(_spmd(), 1, 1, role="trainer")
    assert (env["ROLE_NAME"], env["ROLE_RANK"], env["ROLE_WORLD_SIZE"]) == ("trainer", env["RANK"], env["WORLD_SIZE"])


def _spmd() -> World:
    return World("j", 1, 0, 0, (Node(0, "10.0.0.1", 1, 2), Node(1, "10.0.0.2", 1, 2)), 29500, "spmd")


@pytest.mark.parametrize(("expected", "alive", "missing"), [
    (("a", "b"), ("a", "b"), ()), (("a", "b", "c"), ("b",), ("a", "c")),
    (("h", "h"), ("h",), ("h",)), (("h", "h"), ("h", "h"), ()),
])
def test_missing_ray_nodes_are_counted_per_node_even_on_one_address(expected: tuple, alive: tuple, missing: tuple):
    assert raynodes.missing_nodes(expected, alive) == missing


def test_the_jax_cluster_is_present_only_with_the_contracts_jax_variables():
    full = {"JAX_COORDINATOR_ADDRESS": "h:1", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "0"}
    assert jaxcluster.present(full)
    assert not jaxcluster.present({**full, "JAX_PROCESS_ID": ""}) and not jaxcluster.present({})


def _settings(**overrides: object) -> AgentSettings:
    return agent_settings(entrypoint=("x.py",), **overrides)


def test_agent_settings_refuse_bad_signals_and_file_output_without_a_log_dir():
    with pytest.raises(ConfigError, match="signals_to_handle='SIGTERM,NOPE' is invalid: 'NOPE' is not a signal"):
        _settings(signals_to_handle="SIGTERM,NOPE")
    with pytest.raises(ConfigError, match=r"TRAINPLANE_REDIRECTS='3' is invalid: writes the ranks' streams to files "
                                          r"\(redirected, teed or filtered\), and TRAINPLANE_LOG_DIR is unset; set "
                                          "TRAINPLANE_LOG_DIR"):
        _settings(redirects=streams.parse_std("3"))
    env = {"TRAINPLANE_JOB": "j", "TRAINPLANE_TOKEN": "t", "TRAINPLANE_NODE_RANK": "0", "TRAINPLANE_COORDINATOR": "h",
           "TRAINPLANE_ENTRYPOINT": "[\"x.py\"]", "TRAINPLANE_TEE": "0:9"}
    with pytest.raises(ConfigError, match="TRAINPLANE_TEE='0:9' is invalid"):
        AgentSettings.from_env(env)
    with pytest.raises(ConfigError, match="TORCHELASTIC_SIGNALS_TO_HANDLE='SIGTERM,NOPE' is invalid"):
        AgentSettings.from_env({**env, "TRAINPLANE_TEE": "", "TORCHELASTIC_SIGNALS_TO_HANDLE": "SIGTERM,NOPE"})
    parsed = AgentSettings.from_env({**env, "TRAINPLANE_TEE": "0:1", "TRAINPLANE_LOG_DIR": "/tmp/x",
                                     "TRAINPLANE_ROLE": "trainer", "TORCHELASTIC_SIGNALS_TO_HANDLE": "SIGUSR2"})
    spec = parsed.spec
    assert (spec.outputs.tee.of(0), spec.role, spec.signals_to_handle) == (1, "trainer", "SIGUSR2")
