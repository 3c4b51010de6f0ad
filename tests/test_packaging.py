"""What ``pip install '.[client]'`` and ``'.[infra]'`` install is what the code imports: every
third-party module the client side (``runtime`` outside the agent) and ``components`` import comes
from a distribution the extras name (or one those depend on), and ``runtime.workflow`` imports with
only the ``client`` extra's distributions importable (the others blocked, as in a fresh venv)."""

from __future__ import annotations

import ast
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[1]


def extra(name: str) -> set[str]:
    """The distributions pyproject's extra ``name`` installs here (markers evaluated), canonical names."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"][name]
    return {canonicalize_name(r.name) for r in map(Requirement, declared) if r.marker is None or r.marker.evaluate()}


def closure(names: set[str]) -> set[str]:
    """``names`` and every distribution they require, recursively (as installed here)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for line in metadata.requires(name) or ():
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(req.name))
    return seen


def third_party_imports(*dirs: str) -> dict[str, list[str]]:
    """Top-level third-party module names imported anywhere under ``dirs`` (the runtime agent
    excluded: it is standard library only), with where."""
    found: dict[str, list[str]] = {}
    for directory in dirs:
        for path in sorted((ROOT / directory).rglob("*.py")):
            if "agent" in path.relative_to(ROOT).parts[:2]:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                         [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
                for top in {n.split(".")[0] for n in names} - set(sys.stdlib_module_names) - {"runtime", "components"}:
                    found.setdefault(top, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


PROVIDERS = metadata.packages_distributions()
OPTIONAL = {"torch": "torchrun_options counts GPUs with the job's own torch, when it is there"}
"""Imports no extra needs to install, and why."""


def test_every_third_party_import_comes_from_an_extra():
    installed = closure(extra("client") | extra("infra"))
    missing = {}
    for module, where in third_party_imports("runtime", "components").items():
        dists = {canonicalize_name(d) for d in PROVIDERS.get(module, [module])}
        if module not in OPTIONAL and not dists & installed:
            missing[module] = where
    assert not missing, f"imported but in no extra of pyproject.toml: {missing}"


BLOCKER = """
import importlib.abc, sys
allowed = set(sys.argv[1].split(","))
providers = {providers!r}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top in providers and not allowed & set(providers[top]):
            raise ModuleNotFoundError(f"No module named {{top!r}} (not installed by the extra)", name=top)
        return None
sys.meta_path.insert(0, Block())
import runtime.workflow
from runtime.workflow import LocalCompute, ExistingCompute, KubernetesCompute, fn, cls
from runtime.client import JobClient
print("imported")
"""


def test_runtime_workflow_imports_with_the_client_extra_alone():
    providers = {top: [canonicalize_name(d) for d in dists] for top, dists in PROVIDERS.items()}
    allowed = closure(extra("client")) | {canonicalize_name("trainplane")}
    result = subprocess.run([sys.executable, "-c", BLOCKER.format(providers=providers), ",".join(sorted(allowed))],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "imported", result.stderr
