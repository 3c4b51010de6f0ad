"""Whatever a called function raises comes back as a RemoteError (type, message, traceback starting at
the user's code) and costs nothing: the same worker process serves the next call. Results and
arguments JSON would change are refused, saying where and why. A real 1 x 2 service job."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from runtime import RemoteError
from runtime.agent.service.calls import STR_FAILED, Invocation, remote_error
from runtime.client import JobClient
from runtime.local.jobs import LocalJob, LocalJobSpec
from runtime.workflow import ExistingCompute, fn
from testbed import service_fns
from testbed.jobs import serving
from tests.conftest import ROOT

pytestmark = pytest.mark.process

FNS = "testbed.service_fns"
MODULE = "testbed.service_fns"


@pytest.fixture(scope="module")
def job() -> Iterator[LocalJob]:
    spec = LocalJobSpec(workers=1, num_proc=2, mode="service", master_port=0, grace_period=1.0,
                        pythonpath=(str(ROOT),), allow_pickle=True)
    with serving(spec, ready_timeout=60) as running:
        yield running


@pytest.fixture(params=["json", "pickle"])
def client(job: LocalJob, request: pytest.FixtureRequest) -> Iterator[JobClient]:
    with JobClient(job.url, job.token, serialization=request.param) as c:
        yield c


def pids(client: JobClient) -> list[int]:
    return [r["pid"] for r in client.call(f"{FNS}:whoami", timeout=30)]


def frames(text: str) -> list[str]:
    """The file names of a formatted traceback's frames, in order."""
    return re.findall(r'File "([^"]+)"', text)


@pytest.mark.parametrize(("kind", "exc_type", "message"), [
    ("bad_str", f"{MODULE}.BadStr", STR_FAILED),
    ("unpicklable", f"{MODULE}.Unpicklable", "holds a lock"),
    ("foreign", "module_only_on_the_ranks.Foreign", "from a module only the ranks have"),
    ("base", f"{MODULE}.Stop", "outside Exception"),
    ("exit", "SystemExit", "7"),
])
def test_any_exception_comes_back_and_the_process_stays(client: JobClient, kind: str, exc_type: str, message: str):
    before = pids(client)
    with pytest.raises(RemoteError) as info:
        client.call(f"{FNS}:raise_kind", kind, timeout=30)
    error = info.value
    assert (error.exc_type, error.message, error.fn) == (exc_type, message, f"{FNS}:raise_kind")
    assert error.remote_traceback.rstrip().endswith(f"{exc_type}: {message}" if message else exc_type)
    assert frames(error.remote_traceback)[0].endswith("testbed/service_fns.py"), error.remote_traceback
    assert "runtime/agent" not in error.remote_traceback, "the runtime's frames are left out"
    assert pids(client) == before, "the same processes serve the next call"


def test_a_chain_comes_back_whole_each_part_from_the_users_code(client: JobClient):
    with pytest.raises(RemoteError) as info:
        client.call(f"{FNS}:raise_kind", "chain", timeout=30)
    error = info.value
    assert (error.exc_type, error.message) == ("module_only_on_the_ranks.Foreign", "outer")
    text = error.remote_traceback
    assert [line for line in text.splitlines() if line and not line.startswith(" ")] == [
        "Traceback (most recent call last):", f"{MODULE}.BadStr: {STR_FAILED}",
        "The above exception was the direct cause of the following exception:",
        "Traceback (most recent call last):", "KeyError: 'middle'",
        "During handling of the above exception, another exception occurred:",
        "Traceback (most recent call last):", "module_only_on_the_ranks.Foreign: outer",
    ], text
    assert all(name.endswith("testbed/service_fns.py") for name in frames(text)), text


def test_with_code_sync_the_traceback_names_files_from_the_callers_import_root():
    """A job with nothing on its PYTHONPATH imports the function from the tree the caller sent."""
    spec = LocalJobSpec(workers=1, num_proc=1, mode="service", master_port=0, grace_period=1.0)
    with serving(spec, ready_timeout=60) as synced, pytest.raises(RemoteError) as info:
        fn(service_fns.raise_kind).to(ExistingCompute(synced.url, synced.token))("foreign")
    assert frames(info.value.remote_traceback) == ["testbed/service_fns.py"], info.value.remote_traceback


@pytest.mark.parametrize(("kind", "where", "pickle_hint"), [
    ("tuple", "the result['pair'] is a tuple: JSON has lists only", True),
    ("int_keys", "the result['scores'] has the key 1 (int): JSON keys are strings", True),
    ("generator", "the result is a generator, which no serialization can send (pickle neither)", False),
    ("object", "the result is a builtins.object, which JSON cannot carry", True),
    ("set", "the result[0] is a builtins.set, which JSON cannot carry", True),
])
def test_json_results_json_would_change_are_refused_saying_where(job: LocalJob, kind: str, where: str,
                                                                   pickle_hint: bool):
    with JobClient(job.url, job.token) as client:
        before = pids(client)
        with pytest.raises(RemoteError) as info:
            client.call(f"{FNS}:returns", kind, timeout=30)
        assert info.value.exc_type == "TypeError" and where in info.value.message, info.value.message
        assert ("serialization='pickle'" in info.value.message) is pickle_hint
        assert "pickle" not in info.value.message.replace("(pickle neither)", "") or pickle_hint
        assert pids(client) == before


@pytest.mark.parametrize("kind", ["tuple", "int_keys", "set"])
def test_pickle_carries_what_json_would_change(job: LocalJob, kind: str):
    with JobClient(job.url, job.token, serialization="pickle") as client:
        assert client.call(f"{FNS}:returns", kind, timeout=30) == [service_fns.returns(kind)] * 2


def test_a_pickled_result_that_cannot_be_pickled_is_a_remote_error(job: LocalJob):
    with JobClient(job.url, job.token, serialization="pickle") as client, pytest.raises(RemoteError) as info:
        client.call(f"{FNS}:returns", "generator", timeout=30)
    assert "cannot be pickled: TypeError" in info.value.message


@pytest.mark.parametrize(("args", "kwargs", "where"), [
    (((1, 2),), {}, "argument 0 is a tuple"),
    ((), {"table": {1: "a"}}, "keyword argument table has the key 1 (int): JSON keys are strings (json would turn "
                              'it into "1")'),
    (([{"a": {2}}],), {}, "argument 0[0]['a'] is a builtins.set"),
])
def test_json_arguments_json_would_change_are_refused_before_sending(job: LocalJob, args, kwargs, where: str):
    with JobClient(job.url, job.token) as client, pytest.raises(TypeError, match=re.escape(where)):
        client.invoke(f"{FNS}:echo", args, kwargs, timeout=30)


def test_remote_error_never_raises_and_starts_at_the_users_frame():
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise ValueError("no")

    try:
        Invocation("no_such_module_anywhere:f").resolve()
    except ImportError as exc:
        imported = remote_error(exc, 0, 0, "no_such_module_anywhere:f")
    assert "<frozen" not in imported.remote_traceback, "the import system's frames are left out, as Python does"
    assert frames(imported.remote_traceback)[0] == __file__, "frames of the runtime lead only when they called"
    assert imported.exc_type == "ModuleNotFoundError"
    error = remote_error(Unprintable(), 3, 1, "m:f")
    assert (error.rank, error.node_rank, error.message) == (3, 1, STR_FAILED)
    cut = remote_error(ValueError("x" * 100_000), 0, 0, "m:f")
    assert len(cut.message) < 70_000 and "characters cut" in cut.message
