"""Code sync and hot reload with real agents and processes: the job runs the caller's current code
after an edit, in the same processes; only what changed is imported again; an ExistingCompute job
that never had the code on its PYTHONPATH runs it."""

from __future__ import annotations

import importlib
import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime import RemoteError, TransportError, Unauthorized
from runtime.client import JobClient
from runtime.local.jobs import LocalJobSpec
from runtime.workflow import ExistingCompute, LocalCompute, cls, fn
from runtime.workflow.codesync import source_for
from testbed.jobs import serving
from tests.conftest import importable

pytestmark = pytest.mark.process

EDITED = '''
import os

STATE = {"calls": 0}


def value():
    STATE["calls"] += 1
    return {"value": VALUE, "calls": STATE["calls"], "pid": os.getpid(), "rank": int(os.environ["RANK"])}


class Keeper:
    def __init__(self, start):
        self.count = start

    def add(self):
        self.count += STEP
        return [self.count, VALUE]
'''
STABLE = '''
COUNT = [0]


def bump():
    COUNT[0] += 1
    return COUNT[0]
'''


def write(root: Path, value: int, step: str = "1") -> None:
    """``hotpkg/edited.py`` returning ``value``, its class ``Keeper`` adding ``step`` (an expression)."""
    source = f"VALUE = {value}\n" + textwrap.dedent(EDITED).replace("STEP", step)
    (root / "hotpkg" / "edited.py").write_text(source)


@pytest.fixture
def package(tmp_path: Path) -> Iterator[Path]:
    """A package ``hotpkg`` (modules ``edited`` and ``stable``) under ``src``, importable by this process only."""
    root = tmp_path / "src"
    (root / "hotpkg").mkdir(parents=True)
    (root / "hotpkg" / "__init__.py").write_text("")
    (root / "hotpkg" / "stable.py").write_text(textwrap.dedent(STABLE))
    (root / "hotpkg" / "data.bin").write_bytes(b"x" * 100)
    (root / ".gitignore").write_text("*.bin\n")
    write(root, 1)
    with importable(root, "hotpkg"):
        yield root


def test_an_edit_runs_on_every_rank_in_the_same_processes_and_unchanged_modules_keep_their_state(package: Path):
    edited = importlib.import_module("hotpkg.edited")
    stable = importlib.import_module("hotpkg.stable")
    with LocalCompute(workers=2, num_proc=1, grace_period=1.0) as compute:
        value, bump = fn(edited.value).to(compute), fn(stable.bump).to(compute)
        first = value()
        assert [r["value"] for r in first] == [1, 1] and [r["calls"] for r in value()] == [2, 2]
        assert bump() == [1, 1]

        write(package, 2)
        after = value()

        assert [r["value"] for r in after] == [2, 2], "the new code ran on every rank"
        assert [r["pid"] for r in after] == [r["pid"] for r in first], "in the same processes"
        assert [r["calls"] for r in after] == [1, 1], "the changed module's state was lost"
        assert bump() == [2, 2], "the unchanged module kept its state"
        assert [r["value"] for r in value()] == [2, 2]


def test_instances_are_kept_unless_their_class_changed_and_a_remade_one_says_so(package: Path, capfd):
    edited = importlib.import_module("hotpkg.edited")
    with LocalCompute(workers=2, num_proc=1, grace_period=1.0) as compute:
        keeper = cls(edited.Keeper, 10).to(compute)
        assert keeper.add() == [[11, 1]] * 2

        write(package, 2)
        assert keeper.add() == [[12, 2]] * 2, "its module changed, its class did not: state kept, new module"

        write(package, 2, step="100")
        assert keeper.add() == [[110, 2]] * 2, "the class changed: made again from its arguments"
        err = capfd.readouterr().err
        assert err.count("Keeper instance") == 2 and "made again: its class changed in the new code" in err


def test_an_existing_job_runs_the_callers_code_without_it_on_its_pythonpath(package: Path, tmp_path: Path):
    edited = importlib.import_module("hotpkg.edited")
    spec = LocalJobSpec(workers=2, num_proc=1, mode="service", master_port=0, grace_period=1.0,
                        log_dir=str(tmp_path / "logs"))
    with serving(spec, ready_timeout=60) as job:
        remote = fn(edited.value).to(ExistingCompute(job.url, job.token))
        assert [r["value"] for r in remote()] == [1, 1]
        assert [r["value"] for r in remote()] == [1, 1]
        with JobClient(job.url, job.token) as client:
            assert client.info().raw["service"]["trees"] == 1, "unchanged code is not sent again"
            write(package, 3)
            assert [r["value"] for r in remote()] == [3, 3]
            assert client.info().raw["service"]["trees"] == 2
            assert fn(json.dumps).to(remote.compute)([1]) == ["[1]", "[1]"], "the standard library's own"
            assert client.info().raw["service"]["trees"] == 2, "installed code is never synced"
        trees = sorted(p.name for p in (tmp_path / "logs" / "run").glob("trainplane-code-*/*") if p.is_dir())
        assert len(trees) == 4, "two trees on each of the two nodes"
        synced = next((tmp_path / "logs" / "run").glob("trainplane-code-*/*/tree"))
        assert sorted(str(p.relative_to(synced)) for p in synced.rglob("*") if p.is_file()) == [
            ".gitignore", "hotpkg/__init__.py", "hotpkg/edited.py", "hotpkg/stable.py"], "*.bin is ignored"


def test_a_tree_travels_down_the_job_tree_and_bad_or_unauthenticated_trees_are_refused(package: Path):
    edited = importlib.import_module("hotpkg.edited")
    with LocalCompute(workers=3, num_proc=1, grace_period=1.0, tree_threshold=2, tree_fanout=2) as compute:
        remote = fn(edited.value).to(compute)
        assert [r["value"] for r in remote()] == [1, 1, 1]
        url, token = compute.endpoint.url, compute.endpoint.token
        with JobClient(url, token) as client:
            assert client.info().raw["service"]["trees"] == 1
            snapshot = source_for(str(package)).snapshot()
            archive = source_for(str(package)).archive(snapshot)
            assert client.send_code(snapshot.digest, archive) == 3, "every node holds it"
            digest = "0" * 64
            with pytest.raises(TransportError, match=r"400 .*tree 0{64} refused: the archive's content has digest"):
                client.send_code(digest, archive)
            with pytest.raises(TransportError, match=r"400 .*not a whole gzipped tar"):
                client.send_code(digest, b"garbage")
        with JobClient(url, "wrong-token") as stranger, pytest.raises(Unauthorized):
            stranger.send_code(snapshot.digest, b"")


GROWN = '''
VALUE = 2


def value(extra=0):
    return {"value": VALUE, "extra": extra}


class Keeper:
    def __init__(self, start):
        self.count = start

    def add(self):
        return [self.count, VALUE]

    def more(self, n):
        return n
'''


def test_a_parameter_or_method_added_by_an_edit_can_be_called_at_once(package: Path):
    """This process still has the code as imported; after an edit the arguments are checked by the
    job, which runs the edited code, not against the old copy here."""
    edited = importlib.import_module("hotpkg.edited")
    with LocalCompute(workers=1, num_proc=1, grace_period=1.0) as compute:
        value, keeper = fn(edited.value).to(compute), cls(edited.Keeper, 10).to(compute)
        with pytest.raises(TypeError, match="unexpected keyword argument 'extra'"):
            value(extra=5)
        with pytest.raises(AttributeError, match="has no method 'more'"):
            getattr(keeper, "more")  # noqa: B009 - the lookup itself is what is refused

        (package / "hotpkg" / "edited.py").write_text(textwrap.dedent(GROWN))

        assert value(extra=5) == [{"value": 2, "extra": 5}]
        assert keeper.more(3) == [3]
        with pytest.raises(RemoteError, match="unexpected keyword argument 'nope'"):
            value(nope=1)
