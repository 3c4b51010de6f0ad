"""DistributedJobArgs and the one job spec (runtime/agent/spec/job.py): the settings a job shares with the
launcher, LocalJobSpec and the computes take the spec's defaults, checks and descriptions; what the agent in
a pod is given is the spec the arguments describe."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from components.docs import sentence
from components.errors import InvalidJobArgs
from components.job.args import FIELD_DOCS, SETTING_FIELDS, SHARED, DistributedJobArgs
from components.job.naming import job_names
from components.job.pod import job_spec
from runtime.agent.spec.job import SETTINGS, JobSpec, default, problem
from runtime.agent.spec.ports import base_port
from tests.components.componenttest import job_args

pytestmark = pytest.mark.unit

KUBERNETES_ONLY = {"job_name", "entrypoint", "no_python", "timeout"}
"""Spec settings the component derives instead of taking them as fields: the job name is the component's,
the entrypoint and ``no_python`` come from ``script``/``module``/``command`` and ``args``, the agents' time
limit from ``active_deadline_seconds``."""
NOT_ON_KUBERNETES = {"heartbeat_interval", "heartbeat_ttl", "tree_threshold", "tree_fanout", "allow_pickle", "role",
                     "signals_to_handle", "virtual_local_rank", "redirects", "tee", "local_ranks_filter",
                     "stdout_filters", "stderr_filters", "hang_report_after"}
"""Spec settings a DistributedJob does not take (yet): a pod's agent runs with the spec's default."""


def test_the_shared_fields_are_the_spec_settings_a_job_on_kubernetes_takes() -> None:
    assert SHARED == ("workers", "num_proc", "distribution", "mode", "quorum_workers", "quorum_timeout",
                      "monitor_members", "min_workers", "max_workers", "max_restarts", "grace_period", "master_port",
                      "log_dir", "daemon_args")
    assert set(SETTINGS) == set(SHARED) | KUBERNETES_ONLY | NOT_ON_KUBERNETES


@pytest.mark.parametrize("name", SHARED)
def test_the_components_default_of_a_shared_setting_is_the_specs(name: str) -> None:
    declared = next(f for f in dataclasses.fields(DistributedJobArgs) if f.name == name)
    assert declared.default == default(name)
    assert getattr(DistributedJobArgs(image="python:3.11-slim", script="train.py"), name) == default(name)


def test_a_job_at_its_defaults_is_the_specs_default_job() -> None:
    args = DistributedJobArgs(image="python:3.11-slim", script="train.py", args=["--epochs", "3"])
    assert job_spec(job_names("demo", args), args, ("train.py", "--epochs", "3")) == JobSpec(
        job_name="demo", entrypoint=("train.py", "--epochs", "3"))


BAD_VALUES: list[tuple[str, Any]] = [
    ("workers", 0), ("num_proc", 0), ("distribution", "horovod"), ("mode", "interactive"), ("quorum_workers", 0),
    ("quorum_timeout", 0), ("monitor_members", "yes"), ("min_workers", 0), ("max_workers", 0), ("max_restarts", -1),
    ("grace_period", -1.0), ("master_port", 70000), ("log_dir", ""), ("daemon_args", "--num-cpus=1"),
]


def test_every_shared_setting_has_a_bad_value_below() -> None:
    assert [name for name, _ in BAD_VALUES] == list(SHARED)


@pytest.mark.parametrize(("name", "value"), BAD_VALUES)
def test_a_shared_setting_is_refused_with_the_specs_words(name: str, value: Any) -> None:
    """The spec's check, and for ``master_port`` its check where every node must know the port (the spec's own
    takes 0, a free port on one machine, and its fix offers it)."""
    expected = base_port(free=False)(value) if name == "master_port" else problem(name, value)
    assert expected is not None, "the spec refuses it"
    with pytest.raises(InvalidJobArgs) as info:
        job_args(**{name: value})
    assert (info.value.field, info.value.value, info.value.problem, info.value.fix) == (name, value, *expected)


def test_a_value_the_spec_accepts_the_component_accepts_unless_kubernetes_cannot_run_it() -> None:
    assert job_args(grace_period=0).grace_period == 0, "no grace: SIGKILL right after SIGTERM, as the agent allows"
    assert problem("master_port", 0) is None
    with pytest.raises(InvalidJobArgs, match=r"^master_port=0: 0 picks a free port when a job starts on one machine"):
        job_args(master_port=0)


@pytest.mark.parametrize("name", SHARED)
def test_a_shared_settings_description_is_the_specs_and_what_kubernetes_adds(name: str) -> None:
    assert FIELD_DOCS[name].startswith(sentence(SETTINGS[name].doc))


def test_a_user_env_that_sets_a_shared_setting_names_its_field() -> None:
    for env, name in SETTING_FIELDS.items():
        assert name in SHARED or name == "agent_port"
        with pytest.raises(InvalidJobArgs, match=f"set the DistributedJobArgs field {name} instead$"):
            job_args(env={env: "1"})
