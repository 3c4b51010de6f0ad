"""Run a function on a module right after its first import, without importing it (how the rank bootstrap and
the service worker attach their hooks to torch and JAX only once the user's code imports them).

Standard library only.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any, Callable, Optional, Sequence

Then = Callable[[types.ModuleType], object]
"""What runs on the module once its own code has run (what it returns is dropped)."""


class _Loader(importlib.abc.Loader):
    """Runs a module's real loader, then a function on the module."""

    def __init__(self, real: importlib.abc.Loader, then: Then) -> None:
        self._real = real
        self._then = then

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[types.ModuleType]:
        return self._real.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self._real.exec_module(module)
        self._then(module)

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, is_package, ...
        return getattr(self._real, name)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds one module with the other finders and wraps its loader; then steps aside."""

    def __init__(self, name: str, tag: str, then: Then) -> None:
        self.name = name
        self.tag = tag
        self._then = then

    def find_spec(self, fullname: str, path: Optional[Sequence[str]], target: Optional[types.ModuleType] = None,
                  ) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader, self._then)
                return spec
        return None


def pending(name: str, tag: str) -> bool:
    """Whether a hook ``tag`` waits for module ``name``'s first import."""
    return any(isinstance(f, _Finder) and f.name == name and f.tag == tag for f in sys.meta_path)


def on_import(name: str, tag: str, then: Then) -> None:
    """Run ``then(module)`` right after module ``name`` (dotted) is first imported, once its own code has run.

    Args:
        name: the module's full dotted name.
        tag: names the hook: a second call with the same ``name`` and ``tag`` while the first waits does nothing
            (hooks with other tags on the same module all run, the first added first).
        then: called with the module; what it raises, the import raises.

    Nothing happens when the module is loaded already: the caller acts on ``sys.modules[name]`` itself.
    """
    if name in sys.modules or pending(name, tag):
        return
    sys.meta_path.insert(0, _Finder(name, tag, then))
