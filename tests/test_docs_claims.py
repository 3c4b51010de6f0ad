"""The README and docs/stacks.md state what the code does, where a claim can be read off the code:
the launcher's own exit codes, the body cap, what the client extra installs, the quick start's
backend step, and that the layout table names what is there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tomllib

from runtime.agent import contract

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
README = " ".join((ROOT / "README.md").read_text().split())
STACKS = " ".join((ROOT / "docs" / "stacks.md").read_text().split())


def test_the_exit_code_list_names_every_code_of_the_launchers_own():
    listed = README.split("Exit codes: ", 1)[1].split("A rank may exit", 1)[0]
    for code, what in [(contract.EXIT_NODE_LOST, "when a fixed-size job lost a node"),
                       (contract.EXIT_USAGE, "for bad command-line input"),
                       (contract.EXIT_RENDEZVOUS, "when the world could not be formed"),
                       (contract.EXIT_TIMEOUT, "when the job's time limit")]:
        assert f"{code} {what}" in listed
    assert "128+N when stopped by signal N" in listed


def test_the_body_cap_the_readme_states_is_the_agents():
    mib = int(re.search(r"request body \(its arguments, encoded\) is capped at (\d+) MiB", README)[1])
    assert mib * 1024 * 1024 == contract.MAX_BODY_BYTES
    assert f"{contract.MAX_BODY_BYTES}-byte cap" in README


def test_what_the_docs_say_the_client_extra_installs_is_the_extra():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["client"]
    names = [re.split(r"[<>=!~; ]", r, maxsplit=1)[0] for r in declared]
    said = STACKS.split("`pip install '.[client]'` installs just ", 1)[1].split(", which", 1)[0]
    assert sorted(re.split(r", | and ", said)) == sorted(names)


def test_the_quick_start_logs_in_to_a_backend_before_it_makes_a_stack():
    start = README.split("## Kubernetes", 1)[1]
    assert start.index("pulumi login --local") < start.index("pulumi stack select --create local")


def _layout_rows() -> list[tuple[list[str], str]]:
    """The README's "What is here" table: each row's paths (its first column) and its text."""
    text = (ROOT / "README.md").read_text()
    table = text.split("## What is here", 1)[1].split("\n\n", 2)[1]
    rows = [line.split(" | ", 1) for line in table.splitlines()[2:]]
    return [(re.findall(r"`([^`]+)`", first), rest) for first, rest in rows]


def test_every_path_and_module_the_layout_table_names_exists_where_its_row_says():
    """A module a row names is under the row's paths (or beside them: ``contract.py`` from ``spec/``'s row), so
    a rename or a move that leaves the table behind fails here."""
    missing = []
    for paths, text in _layout_rows():
        dirs = [ROOT / p if p.endswith("/") else (ROOT / p).parent for p in paths]
        missing += [p for p in paths if not (ROOT / p).exists()]
        missing += [f"{name} (row {paths[0]})" for name in re.findall(r"`([\w/]+\.py)`", text)
                    if not (ROOT / name).is_file() and not any(next(d.rglob(name), None) for d in dirs)
                    and not any((d.parent / name).is_file() for d in dirs)]
    assert missing == []


def test_every_package_of_the_runtime_has_a_row_of_the_layout_table():
    """A new package of ``runtime/`` (as ``runtime/local/`` was) gets its own row."""
    listed = {p.rstrip("/") for paths, _ in _layout_rows() for p in paths}
    packages = {str(p.parent.relative_to(ROOT)) for p in (ROOT / "runtime").rglob("__init__.py")
                if "__pycache__" not in p.parts and p.parent != ROOT / "runtime"}
    assert sorted(packages - listed) == []
