"""Objects that live in a service worker process between calls: one instance of a user's class per
rank, made and called through ``POST /call`` like any function (``runtime.workflow.cls``), as
``contract.INSTANCE_CALL`` names :func:`call`.

Every call names the class, the instance and its constructor's arguments, so a process that lacks
the instance (it is new: the first call, or its predecessor died) makes it first and says so when
it is making one again. After new code was loaded (``runtime.agent.code``) the class is looked up
afresh: an instance whose class's source did not change keeps its state and takes the new class
(its methods see the new module); one whose class changed is made again from its constructor's
arguments, and the process says so on its stderr, which the caller sees. Standard library only.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import sys
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence


@dataclass
class _Held:
    cls: type
    source: str
    obj: object


_INSTANCES: dict[str, _Held] = {}


def call(class_name: str, instance_id: str, init_args: Sequence[Any], init_kwargs: Mapping[str, Any],
         method: Optional[str], args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """Make instance ``instance_id`` of ``class_name`` if this process has none (or its class changed),
    then call ``method`` on it.

    Args:
        class_name: ``module:qualname`` of the class.
        instance_id: the instance's id, the same on every rank.
        init_args: positional arguments of the constructor.
        init_kwargs: keyword arguments of the constructor.
        method: the method to call, or ``None`` to make the instance only.
        args: the method's positional arguments.
        kwargs: its keyword arguments.

    Returns:
        What the method returned (``None`` when only making the instance).

    Raises:
        TypeError: ``class_name`` is not a class, or ``method`` is not a public method of it.
        Whatever the constructor or the method raises.
    """
    klass = _resolve(class_name)
    held = _INSTANCES.get(instance_id)
    if held is None:
        if method is not None:
            _say(f"{_short(class_name)} instance {instance_id[:8]} made again: this process did not have it (it is "
                 "new; the state of the previous one is lost)")
        held = _make(klass, init_args, init_kwargs)
    elif held.cls is not klass:
        source = _source(klass)
        if source == held.source:
            held.obj.__class__ = klass
            held.cls = klass
        else:
            _say(f"{_short(class_name)} instance {instance_id[:8]} made again: its class changed in the new code "
                 "(its state is lost)")
            held = _make(klass, init_args, init_kwargs)
    _INSTANCES[instance_id] = held
    if method is None:
        return None
    if method.startswith("_"):
        raise TypeError(f"{method!r} is not a public method of {class_name}")
    bound = getattr(held.obj, method)
    if not callable(bound):
        raise TypeError(f"{class_name}.{method} is a {type(bound).__name__}, not a method")
    return bound(*args, **kwargs)


def _make(klass: type, init_args: Sequence[Any], init_kwargs: Mapping[str, Any]) -> _Held:
    return _Held(klass, _source(klass), klass(*init_args, **init_kwargs))


def _resolve(class_name: str) -> type:
    module_name, _, qualname = class_name.partition(":")
    found: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        found = getattr(found, part)
    if not inspect.isclass(found):
        raise TypeError(f"{class_name} is a {type(found).__name__}, not a class")
    return found


def _source(klass: type) -> str:
    """A digest of the class's source text (its name when the source cannot be read)."""
    try:
        text = inspect.getsource(klass)
    except (OSError, TypeError):
        text = klass.__qualname__
    return hashlib.sha256(text.encode()).hexdigest()


def _short(class_name: str) -> str:
    return class_name.rpartition(":")[2]


def _say(message: str) -> None:
    sys.stderr.write(f"trainplane: {message}\n")
    sys.stderr.flush()
