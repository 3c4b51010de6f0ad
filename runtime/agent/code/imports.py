"""A worker process importing from a synced tree, and moving to the next one: hot reload in place.

The process keeps running; only the modules that must change are imported again:

* a module whose file changed (or went away) in the new tree is dropped from ``sys.modules``;
* so is a module that refers to a dropped one: one of its globals is that module, or an object
  defined in it (``import a``, ``from a import f``, ``from a import Trainer``), repeatedly, until
  no module left refers to a dropped one;
* every other module of the old tree stays, with its state, and is re-pointed at its (identical)
  file in the new tree, so what it imports later comes from the new tree.

Modules outside the tree (the standard library, torch, anything installed) are never touched, so
their import cost is paid once per process. The next call imports what was dropped, from the new
tree. A value copied out of a changed module (``from a import LIMIT``, a number) is not seen as a
reference and keeps its old value. Standard library only.
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType
from typing import Optional

from runtime.agent.code.store import manifest


class TreeImports:
    """Which synced tree this process imports from."""

    def __init__(self) -> None:
        self.current: Optional[str] = None
        self._manifest: dict[str, str] = {}

    def use(self, tree: str) -> list[str]:
        """Import from ``tree`` from now on.

        Args:
            tree: a tree directory of the node's ``CodeStore``.

        Returns:
            The names of the modules dropped (to be imported again from ``tree``), sorted.

        Raises:
            OSError, ValueError: the tree has no readable manifest.
        """
        if tree == self.current:
            return []
        new = manifest(tree)
        old_tree, old = self.current, self._manifest
        dropped: list[str] = []
        if old_tree is not None:
            changed = {path for path in old if old[path] != new.get(path)}
            ours = {name: module for name, module in list(sys.modules.items())
                    if _relative(module, old_tree) is not None}
            gone = {name for name, module in ours.items() if _relative(module, old_tree) in changed}
            gone |= _referrers(ours, gone)
            for name in gone:
                del sys.modules[name]
            for name, module in ours.items():
                if name not in gone:
                    _repoint(module, old_tree, tree)
            dropped = sorted(gone)
            sys.path[:] = [p for p in sys.path if p != old_tree]
            sys.path_importer_cache.pop(old_tree, None)
        sys.path.insert(0, tree)
        importlib.invalidate_caches()
        self.current, self._manifest = tree, new
        return dropped


def _relative(module: ModuleType, tree: str) -> Optional[str]:
    """``module``'s file relative to ``tree`` (``/``-separated), or ``None`` when it is not in it."""
    file = getattr(module, "__file__", None)
    if not isinstance(file, str) or not file.startswith(tree + os.sep):
        return None
    return os.path.relpath(file, tree).replace(os.sep, "/")


def _referrers(modules: dict[str, ModuleType], gone: set[str]) -> set[str]:
    """The modules that refer, directly or through others, to a module in ``gone``."""
    found: set[str] = set()
    while True:
        dropped = gone | found
        more = {name for name, module in modules.items()
                if name not in dropped and _refers(module, dropped)}
        if not more:
            return found
        found |= more


def _refers(module: ModuleType, names: set[str]) -> bool:
    """Whether a global of ``module`` is a module in ``names`` or was defined in one, or its package
    is one. A package's own submodules do not count: importing one again sets it on the package."""
    for key, value in list(vars(module).items()):
        if isinstance(value, ModuleType):
            if value.__name__ in names and value.__name__ != f"{module.__name__}.{key}":
                return True
            continue
        if _defined_in(value) in names:
            return True
    parent = module.__name__.rpartition(".")[0]
    return bool(parent) and parent in names


def _defined_in(value: object) -> str:
    """The ``__module__`` of ``value``, or ``""`` (a proxy object's ``__getattr__`` may raise anything)."""
    try:
        found = getattr(value, "__module__", None)
    except Exception:
        return ""
    return found if isinstance(found, str) else ""


def _repoint(module: ModuleType, old: str, new: str) -> None:
    """Point a kept module's file, package path and spec at the same file in the new tree."""

    def moved(path: str) -> str:
        return new + path[len(old):] if path.startswith(old + os.sep) else path

    module.__file__ = moved(module.__file__ or "")
    if getattr(module, "__cached__", None):
        vars(module)["__cached__"] = None  # its bytecode cache is the old tree's
    path = getattr(module, "__path__", None)
    if isinstance(path, list):
        module.__path__ = [moved(p) for p in path]
    spec = getattr(module, "__spec__", None)
    if spec is not None:
        if isinstance(spec.origin, str):
            spec.origin = moved(spec.origin)
        if isinstance(spec.submodule_search_locations, list):
            spec.submodule_search_locations[:] = [moved(p) for p in spec.submodule_search_locations]
