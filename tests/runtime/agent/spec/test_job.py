"""The one job spec: every front end's defaults are the spec's, one check worded by each front end, and
the writer of the agent's environment and its reader are inverse."""

from __future__ import annotations

import inspect
import re

import pytest

from runtime.agent import contract
from runtime.agent.errors import ConfigError, SpecError
from runtime.agent.spec import streams
from runtime.agent.spec.agent_settings import AgentSettings, spec_from_env
from runtime.agent.spec.env_writer import agent_env, job_env
from runtime.agent.spec.job import SETTINGS, JobSpec, check, default, problem
from runtime.local import jobs, launch
from runtime.workflow import KubernetesCompute, LocalCompute
from runtime.workflow.compute import Compute
from testbed.settings import agent_settings

pytestmark = pytest.mark.unit

FRONT_END_ONLY = {"job_name", "entrypoint", "log_dir"}
"""Settings a command line or a compute always gives (a job id, the script, a run's log directory)."""
PICKED_LOCALLY = {"master_port": 0}
"""Settings a job on this machine picks unless given: the launcher, as LocalCompute, reserves a free port
block (0) so that jobs started together never share one (issue 12)."""


def test_the_launcher_takes_every_setting_with_a_flag_and_its_one_default(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(launch.SHUTDOWN_TIMEOUT_ENV, raising=False)
    parser = launch.build_parser()
    ns = parser.parse_args(["examples/ddp_digits.py"])
    launch.validate(parser, ns)
    spec = launch.spec_from_args(ns)
    flagged = [name for name, declared in SETTINGS.items() if declared.flags]
    assert {"workers", "num_proc", "quorum_timeout", "heartbeat_ttl", "grace_period", "tree_fanout"} <= set(flagged)
    for name in SETTINGS:
        if name not in FRONT_END_ONLY:
            assert getattr(spec, name) == PICKED_LOCALLY.get(name, default(name)), name
    for name in flagged:
        assert parser._option_string_actions[SETTINGS[name].flags[0]].dest == name


def test_every_front_end_defaults_to_the_specs_defaults():
    """LocalJobSpec, the computes and the agent reading a bare environment take each shared setting's
    one default; the place for DistributedJobArgs' is issue 15's (it takes them from the spec)."""
    local_spec = jobs.LocalJobSpec(entrypoint=("x.py",))
    for name in SETTINGS:
        if name != "entrypoint":
            assert getattr(local_spec, name) == default(name), name
    for front_end in (Compute.__init__, LocalCompute.__init__, KubernetesCompute.__init__):
        for name, parameter in inspect.signature(front_end).parameters.items():
            if name in SETTINGS:
                assert parameter.default == default(name), (front_end.__qualname__, name)
    bare = {contract.JOB_NAME: "j", contract.TOKEN: "t", contract.NODE_RANK_SETTING: "0",
            contract.COORDINATOR_HOST: "h", contract.ENTRYPOINT: '["x.py"]'}
    assert AgentSettings.from_env(bare).spec == JobSpec(job_name="j", entrypoint=("x.py",))


def test_one_default_per_setting_the_quorum_timeout_among_them():
    assert default("quorum_timeout") == 300.0 and default("heartbeat_ttl") == 3.0 and default("grace_period") == 5.0
    assert JobSpec(entrypoint=("x.py",)).quorum == 1 and not JobSpec(entrypoint=("x.py",)).elastic
    assert JobSpec(entrypoint=("x.py",), workers=3, max_workers=4).elastic, "min or max set: elastic"


EVERY_SETTING_AWAY_FROM_ITS_DEFAULT = JobSpec(
    job_name="j", workers=4, num_proc=3, mode="batch", distribution="pytorch", entrypoint=("-m", "pkg.train", "--lr=1"),
    no_python=False, quorum_workers=3, quorum_timeout=42.5, max_restarts=2, min_workers=2, max_workers=6,
    master_port=31000, monitor_members=False, heartbeat_interval=0.5, heartbeat_ttl=4.0, grace_period=0.0,
    tree_threshold=8, tree_fanout=3, allow_pickle=True, log_dir="/var/log/job", role="trainer",
    signals_to_handle="SIGTERM,SIGUSR1", virtual_local_rank=True, redirects=streams.parse_std("0:1,1:2"),
    tee=streams.parse_std("3"), local_ranks_filter=frozenset({0, 2}), stdout_filters=("loss", "a,b"),
    stderr_filters=("warn",),
)


@pytest.mark.parametrize("spec", [JobSpec(entrypoint=("x.py",)), EVERY_SETTING_AWAY_FROM_ITS_DEFAULT,
                                  JobSpec(mode="service", distribution="ray", daemon_args=("--num-cpus=2",))],
                         ids=["defaults", "every setting changed", "ray service"])
def test_the_one_writer_and_the_agents_reader_are_inverse(spec: JobSpec):
    written = job_env(spec)
    assert set(written) <= {declared.env for declared in SETTINGS.values()}
    assert spec_from_env(written) == spec


def test_an_agents_whole_environment_reads_back_as_its_settings():
    settings = agent_settings(job_name="j", token="secret", node_id=2, workers=3, coordinator="10.0.0.1",
                              coordinator_port=40000, agent_port=40002, advertise_address="10.0.0.3",
                              bind_address="10.0.0.3", resolve={"j-0": "10.0.0.1"}, verdict_file="/tmp/v.json",
                              daemon_prefix=("/opt/wrap",), die_with_parent=True)
    assert AgentSettings.from_env(agent_env(settings)) == settings


def test_one_check_is_worded_by_each_front_end_in_its_own_names():
    with pytest.raises(SpecError) as info:
        JobSpec(entrypoint=("x.py",), workers=2, quorum_workers=3)
    error = info.value
    assert (error.field, error.value) == ("quorum_workers", 3)
    assert str(error) == ("quorum_workers=3 is invalid: must be from 1 to workers (2); use a quorum from 1 to the "
                          "number of nodes (2)")
    assert error.line(lambda name: {"workers": "--nnodes", "quorum_workers": "--quorum-workers"}[name]) == \
        "--quorum-workers: must be from 1 to --nnodes (2) (got 3); use a quorum from 1 to the number of nodes (2)"
    with pytest.raises(ConfigError, match=re.escape("TRAINPLANE_QUORUM_WORKERS=3 is invalid: must be from 1 to "
                                                    "TRAINPLANE_WORKERS (2); use a quorum from 1")):
        spec_from_env({contract.WORKERS: "2", contract.QUORUM_WORKERS: "3", contract.ENTRYPOINT: '["x.py"]'})


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("workers", 0, ("must be 1 or more", "use 1 or more nodes")),
    ("workers", True, ("must be a whole number", "use 1 or more nodes")),
    ("tree_fanout", 1, ("must be 2 or more", "use 2 or more children per node")),
    ("quorum_timeout", 0, ("must be a positive number of seconds", "use seconds > 0")),
    ("grace_period", -1.0, ("must be 0 or more seconds", "use 0 or more seconds")),
    ("master_port", 70000, ("must be from 0 to 65535", "use a TCP port from 1 to 65535, or 0 for a free one")),
    ("distribution", "mpi", ("must be one of spmd, pytorch, jax, tensorflow, ray, monarch",
                             "use one of spmd, pytorch, jax, tensorflow, ray, monarch")),
    ("quorum_workers", None, None),
    ("workers", 3, None),
])
def test_each_setting_checks_a_value_on_its_own_as_the_spec_does(name: str, value: object, expected: object):
    assert problem(name, value) == expected
    if expected is None:
        check(name, value)
    else:
        with pytest.raises(SpecError, match=f"^{name}="):
            check(name, value)


def test_a_local_job_refuses_a_job_setting_given_as_an_environment_variable():
    with pytest.raises(ConfigError, match="TRAINPLANE_TREE_FANOUT is the job setting tree_fanout; set LocalJobSpec's "
                                          "tree_fanout instead"):
        jobs.LocalJobSpec(mode="service", env={contract.TREE_FANOUT: "3"})
    assert jobs.LocalJobSpec(mode="service", env={"OTHER": "1"}).env == {"OTHER": "1"}
