"""The layout's rules, read from the source alone: small modules, no import cycle, the agent's public surface
(its spec, contract and errors, and the user API's in-pod modules), benchmarks and the testbed independent of
the tests (the pod bundle's rule, which runs a process, is ``tests/test_pod_bundle.py``)."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Union

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.unit

MAX_LINES = 400


def test_no_module_of_the_code_or_its_tests_is_over_400_lines():
    roots = ("runtime", "components", "testbed", "bench", "tests")
    long = {str(p.relative_to(ROOT)): len(p.read_text().splitlines())
            for root in roots for p in (ROOT / root).rglob("*.py") if "__pycache__" not in p.parts}
    assert {path: n for path, n in long.items() if n > MAX_LINES} == {}


PACKAGES = ("runtime", "components", "testbed", "bench", "tests", "examples")
PUBLIC_AGENT = ("runtime.agent.spec", "runtime.agent.contract", "runtime.agent.errors")
"""The parts of ``runtime.agent`` that code outside it may import: the job spec and port layout, the formats
the agent shares with its clients and front ends (its HTTP's rules, the call wire format, the job's statuses,
the console's lines, the code archive, the cache-directory tag, addresses), the environment contract, the
errors."""
HARNESSES = ("runtime.agent", "testbed", "bench", "tests")
"""Code that drives the agent's own parts: the agent itself, and the tests and benchmarks' harnesses."""
USER_API = "runtime"
"""The package ``runtime`` itself (``runtime/__init__.py``): the one module outside ``runtime.agent`` that
ships to pods in the agent's bundle (``components.job.bundle.PACKAGE_INIT``, ``tests/test_pod_bundle.py``),
because the ranks' processes import it. Its user API is in-pod code of the agent's, run in the user's
processes: ``runtime.membership`` is the agent's ``execution.delivery`` (the membership changes its agent
delivers), ``runtime.distributed`` its ``execution.torchgroup`` (torch's process group across the worlds
the agent forms). So it may import the agent's modules, but only to re-export them whole under a name of
its ``__all__`` (:func:`test_the_user_api_re_exports_whole_agent_modules_and_imports_nothing_else_private`);
the rest of ``runtime`` (the client, the workflow API, local mode) imports the public parts alone."""


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


BLOCKS = ("body", "orelse", "finalbody", "handlers", "cases")
"""The fields of a statement that hold statements (an ``except`` clause's and a ``case``'s own ``body``
included): an import is a statement, so nothing else needs walking (the expressions are most of a tree)."""


def _import_statements(statements: Iterable[ast.AST]) -> Iterator[Union[ast.Import, ast.ImportFrom]]:
    """The imports among ``statements`` and the blocks in them, at any depth but a ``TYPE_CHECKING`` block."""
    for stmt in statements:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            yield stmt
        elif isinstance(stmt, ast.If) and ast.unparse(stmt.test).endswith("TYPE_CHECKING"):
            yield from _import_statements(stmt.orelse)
        else:
            for block in BLOCKS:
                yield from _import_statements(getattr(stmt, block, ()))


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The project modules ``path`` imports, at any depth but a ``TYPE_CHECKING`` block: a ``from
    package import name`` counts the submodule ``name`` when there is one."""
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path.parent)
    found: set[str] = set()
    for node in _import_statements(ast.parse(path.read_text()).body):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
            base = ".".join([*parts, *([node.module] if node.module else [])])
            found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names)
    return {name for name in found if name in modules}


@functools.cache
def _graph() -> dict[str, set[str]]:
    paths = [p for root in PACKAGES for p in (ROOT / root).rglob("*.py") if "__pycache__" not in p.parts]
    modules = {_module_name(p) for p in paths}
    return {_module_name(p): _imports(p, modules) for p in paths}


def _under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_no_module_imports_itself_back_through_another():
    graph = _graph()
    cycles = []
    for start in sorted(graph):
        seen, stack = set(), [(start, (start,))]
        while stack:
            module, path = stack.pop()
            for imported in graph[module]:
                if imported == start:
                    cycles.append(" -> ".join((*path, start)))
                elif imported not in seen:
                    seen.add(imported)
                    stack.append((imported, (*path, imported)))
    assert cycles == []


def _private_agent(imports: set[str]) -> set[str]:
    return {i for i in imports if _under(i, ("runtime.agent",)) and not _under(i, PUBLIC_AGENT)}


def test_outside_the_agent_only_its_spec_contract_and_errors_are_imported():
    private = {module: _private_agent(imports) for module, imports in _graph().items()
               if not _under(module, HARNESSES) and module != USER_API}
    assert {module: found for module, found in private.items() if found} == {}


def test_the_user_api_re_exports_whole_agent_modules_and_imports_nothing_else_private():
    tree = ast.parse((ROOT / "runtime" / "__init__.py").read_text())
    exported = next(ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                    and [ast.unparse(t) for t in node.targets] == ["__all__"])
    modules = set(_graph())
    imported = [(alias.name, None) for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    imported += [(f"{node.module}.{alias.name}", alias.asname or alias.name) for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module for alias in node.names]
    private = [(name, bound) for name, bound in imported
               if _private_agent({name if name in modules else name.rpartition(".")[0]})]
    assert private, "the user API re-exports the agent's in-pod modules (USER_API's docstring)"
    assert [name for name, bound in private if name not in modules or bound not in exported] == []


def test_benchmarks_and_the_testbed_import_nothing_from_the_tests():
    graph = _graph()
    assert {m: i for m, i in graph.items() if _under(m, ("bench", "testbed")) and _under_any(i, ("tests",))} == {}


def test_benchmarks_and_the_testbed_run_no_module_of_the_tests_by_name():
    """Nor by a name in a string: ``python -m tests...``, or a call's ``tests....:function`` that the job's
    processes import (the functions service jobs run are ``testbed.service_fns``)."""
    modules = set(_graph())
    named = {_module_name(p): {n.value for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, ast.Constant)
                               and isinstance(n.value, str) and n.value.split(":", 1)[0] in modules
                               and _under(n.value.split(":", 1)[0], ("tests",))}
             for root in ("bench", "testbed") for p in (ROOT / root).rglob("*.py") if "__pycache__" not in p.parts}
    assert {module: found for module, found in named.items() if found} == {}


def _under_any(modules: set[str], prefixes: tuple[str, ...]) -> bool:
    return any(_under(m, prefixes) for m in modules)
