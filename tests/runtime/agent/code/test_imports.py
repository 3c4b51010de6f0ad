"""Moving a process to a new tree: only changed modules, and the modules that refer to them, are
imported again; the rest keep their state and look in the new tree from then on."""

from __future__ import annotations

import hashlib
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.agent.code.imports import TreeImports
from runtime.agent.code.store import CodeStore
from runtime.agent.spec.archive import Entry, pack, tree_digest

pytestmark = pytest.mark.unit

NAMES = ("rl_changed", "rl_user", "rl_alone", "rl_pkg")
BASE = {
    "rl_changed.py": "V = 1\ndef f():\n    return V\n",
    "rl_user.py": "from rl_changed import f\nSTATE = []\n",
    "rl_alone.py": "STATE = []\n",
    "rl_pkg/__init__.py": "",
    "rl_pkg/sub.py": "W = 1\n",
    "rl_pkg/other.py": "STATE = []\n",
}


def add(store: CodeStore, files: dict[str, str]) -> str:
    items = [(Entry(p, False, hashlib.sha256(t.encode()).hexdigest()), t.encode()) for p, t in files.items()]
    return store.add(tree_digest(e for e, _ in items), pack(items))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[CodeStore]:
    path = list(sys.path)
    try:
        yield CodeStore(str(tmp_path / "store"))
    finally:
        sys.path[:] = path
        for name in [n for n in sys.modules if n.split(".")[0] in NAMES]:
            del sys.modules[name]


def test_changed_modules_and_their_users_are_dropped_the_rest_keep_state(store: CodeStore):
    imports = TreeImports()
    first = add(store, BASE)
    assert imports.use(first) == []
    user, alone, other = (importlib.import_module(n) for n in ("rl_user", "rl_alone", "rl_pkg.other"))
    importlib.import_module("rl_pkg.sub")
    user.STATE.append(1)
    alone.STATE.append(1)
    other.STATE.append(1)

    second = add(store, {**BASE, "rl_changed.py": "V = 2\ndef f():\n    return V\n", "rl_pkg/sub.py": "W = 2\n"})
    dropped = imports.use(second)

    assert dropped == ["rl_changed", "rl_pkg.sub", "rl_user"]
    assert importlib.import_module("rl_user").f() == 2 and importlib.import_module("rl_user").STATE == []
    assert importlib.import_module("rl_alone") is alone and alone.STATE == [1]
    assert importlib.import_module("rl_pkg.other") is other and other.STATE == [1]
    assert importlib.import_module("rl_pkg.sub").W == 2
    assert alone.__file__.startswith(second) and importlib.import_module("rl_pkg").__path__ == [f"{second}/rl_pkg"]
    assert sys.path[0] == second and first not in sys.path
    assert imports.use(second) == [], "the same tree again is nothing to do"
