"""Where a job's processes import a function from, or why they cannot: checked when ``fn()`` is called.

A job's processes find a function by ``module:qualname``, importing ``module`` from a directory on
their PYTHONPATH. That needs a function defined with ``def`` at the top level of a module (or a
class) that lives in a ``.py`` file with an importable name. Everything else is refused at once, in
the user's terms: a lambda, a function defined inside another function, a bound method, a built-in,
and a function typed into an interactive session (the REPL, ``python -``, ``python -c``, a notebook)
whose source is in no file at all.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, NamedTuple, Optional

INTERACTIVE = ("an interactive session or a command string (the Python REPL, `python -`, `python -c` or a "
               "notebook)")


class Location(NamedTuple):
    """How worker processes import a function.

    Attributes:
        name: ``module:qualname``, as ``runtime.client.JobClient.call`` takes it.
        root: the function's import root, the directory ``module``'s top-level package or module is
            in: the root of the source tree code sync sends to the job (``runtime.workflow.codesync``),
            where the processes import ``module`` from (a root in this interpreter's own standard
            library or site-packages is not synced: the processes import from their environment).
    """

    name: str
    root: str


def locate(func: Callable[..., Any]) -> Location:
    """Where worker processes import ``func`` from: its ``module:qualname`` and the directory to import from.

    A function of the script Python runs as ``__main__`` is named by the script's module: its stem
    (``python driver.py`` gives ``driver:train``), or the module given to ``python -m``.

    Raises:
        ValueError: ``func`` cannot be imported by name in another process; says why and what to do.
    """
    label = _label(func)
    qualname = getattr(func, "__qualname__", None)
    if inspect.ismethod(func):
        raise ValueError(f"{label} is a bound method: a job's processes cannot get its instance; pass a "
                         "module-level function (or the class's function and the state as arguments)")
    if not isinstance(qualname, str) or not qualname:
        raise ValueError(f"{label} is not a function defined with def (it has no qualified name): pass a "
                         "module-level function")
    if "<lambda>" in qualname:
        raise ValueError(f"{label} is a lambda: a job's processes can import only named functions; define it "
                         "with def at the top level of a module")
    if "<locals>" in qualname:
        outer = qualname.split(".<locals>", 1)[0]
        raise ValueError(f"{label} is defined inside {outer}(): a job's processes can import only module-level "
                         "functions; move it to the top level of its module (pass what it used from "
                         f"{outer}() as arguments)")
    module_name = getattr(func, "__module__", None)
    path: Optional[Path]
    if module_name == "__main__":
        module_name, path = _main_module(label)
        module = sys.modules.get("__main__")
    else:
        path = _source_file(func, label)
        module = sys.modules.get(module_name) if isinstance(module_name, str) else None
    if not isinstance(module_name, str) or path is None:
        raise ValueError(f"{label} has no Python source file (it is built in or compiled): pass a function "
                         "defined in a .py file")
    if module is not None and _resolve(module, qualname) is not func:
        raise ValueError(f"{label} is not what {module_name}:{qualname} names (the name was rebound after the "
                         "function was defined, e.g. by a decorator without functools.wraps): pass the function "
                         "the module name refers to")
    root = path.parent.parent if path.name == "__init__.py" else path.parent
    for _ in range(module_name.count(".")):
        root = root.parent
    return Location(f"{module_name}:{qualname}", str(root))


def _label(func: object) -> str:
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
    return f"fn({name})" if isinstance(name, str) else f"fn({func!r})"


def _main_file() -> Optional[Path]:
    main = sys.modules.get("__main__")
    file = getattr(main, "__file__", None)
    if not isinstance(file, str) or file.startswith("<"):
        return None
    path = Path(file).resolve()
    return path if path.is_file() else None


def _main_module(label: str) -> tuple[str, Path]:
    """The importable name and file of the ``__main__`` module.

    Raises:
        ValueError: ``__main__`` has no file (an interactive session), or the script's name is not a
            module name.
    """
    main = sys.modules.get("__main__")
    path = _main_file()
    if path is None:
        raise ValueError(f"{label} was defined in {INTERACTIVE}, so its source is in no file a job's processes "
                         "could import: put it in a .py file and import it from there (the driver can stay "
                         "interactive)")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name:
        return spec.name, path
    if not path.stem.isidentifier() or path.suffix != ".py":
        raise ValueError(f"{label} is defined in the script {path.name}, which a job's processes would import as "
                         f"a module, and {path.stem!r} is not a module name: rename the script "
                         f"(e.g. {_identifier(path.stem)}.py)")
    return path.stem, path


def _source_file(func: Callable[..., Any], label: str) -> Optional[Path]:
    try:
        file = inspect.getfile(func)
    except TypeError:
        return None
    if file.startswith("<"):
        raise ValueError(f"{label} was defined in {INTERACTIVE} or by exec(), so its source is in no file a job's "
                         "processes could import: put it in a .py file and import it from there")
    path = Path(file).resolve()
    return path if path.is_file() else None


def _resolve(module: ModuleType, qualname: str) -> object:
    found: object = module
    for part in qualname.split("."):
        found = getattr(found, part, None)
        if found is None:
            return None
    return found


def _identifier(stem: str) -> str:
    cleaned = "".join(c if c.isalnum() or c == "_" else "_" for c in stem)
    return cleaned if cleaned[:1].isalpha() or cleaned[:1] == "_" else f"_{cleaned}"
