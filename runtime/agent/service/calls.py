"""What ``POST /call`` and ``POST /exec`` carry, validated; and what a rank does with a call.

Standard library only. Bodies are JSON objects (``runtime.agent.spec.wire`` covers values and errors)::

    POST /call   (client -> coordinator)
        {"fn": "pkg.mod:qualname", "serialization": "json", "args": [...], "kwargs": {...},
         "timeout": 30.0, "workers": [0, 2], "output": "<key>", "code": "<tree digest>"}
        200 -> {"ranks": [0, 1, 4, 5], "results": [...], "serialization": "json", "generation": 1}

    POST /exec   (agent -> agent, internal)
        {"call_id": "...", "generation": 1, "invocation": {"fn": ..., "serialization": ..., "args": ...,
         "kwargs": ..., "payload": ...}, "timeout": 29.5, "nodes": [4, 5, 6, 7], "fanout": 50,
         "output": "<key>", "code": "<tree digest>"}
        -> runs on node rank ``nodes[0]`` (the receiver) and forwards ``nodes[1:]``, split into at most
           ``fanout`` contiguous subtrees; 200 -> {"ranks": [...], "results": [...]}
        {"cancel": "<call_id>"} -> stops that call on the receiver and its subtree; 200 -> {"cancelled": bool}

``timeout`` is relative (seconds remaining), so no hop depends on another host's clock. ``workers``
names node ranks; ``null`` means every node. ``output`` (optional) is the caller's key for reading
what the ranks write during the call (``runtime.agent.service.output_relay``); without it nothing is sent.
``code`` (optional) names the synced tree the call imports from (``runtime.agent.code``); without
it the processes import from their own PYTHONPATH.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import re
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence

from runtime.agent.errors import HttpError, RemoteError
from runtime.agent.service.output_relay import parse_key
from runtime.agent.spec.archive import ArchiveError, check_digest
from runtime.agent.spec.wire import JSON, PICKLE, SERIALIZATIONS, unpack_pickled_arguments

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_FN = re.compile(rf"{_NAME}(?:\.{_NAME})*:{_NAME}(?:\.{_NAME})*")
_RUNTIME_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
"""The agent package's directory: frames from files under it are the runtime's own, not the user's."""


@dataclass(frozen=True)
class Invocation:
    """The function one call runs on every rank, with its arguments as they travel.

    Attributes:
        fn: ``module:qualname``, importable in the worker processes.
        serialization: ``json`` or ``pickle``.
        args: positional arguments (``json``).
        kwargs: keyword arguments (``json``).
        payload: base64 pickle of ``(args, kwargs)`` (``pickle``).
    """

    fn: str
    serialization: str = JSON
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    payload: str = ""

    def to_json(self) -> dict[str, Any]:
        """The JSON object form; :meth:`from_json` reverses it."""
        out: dict[str, Any] = {"fn": self.fn, "serialization": self.serialization}
        if self.serialization == PICKLE:
            out["payload"] = self.payload
        else:
            out["args"] = list(self.args)
            out["kwargs"] = dict(self.kwargs)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any], allow_pickle: bool) -> Invocation:
        """Validate an invocation.

        Args:
            data: the JSON object (a ``/call`` body or an ``/exec`` body's ``invocation``).
            allow_pickle: whether this deployment accepts pickled arguments.

        Raises:
            HttpError: 400 naming the bad field; 415 for ``pickle`` when it is not enabled.
        """
        fn = data.get("fn")
        if not isinstance(fn, str) or not _FN.fullmatch(fn):
            raise HttpError(400, f"fn={fn!r} is invalid: use 'module:qualname', e.g. 'pkg.train:main'")
        serialization = data.get("serialization", JSON)
        if serialization not in SERIALIZATIONS:
            raise HttpError(400, f"serialization={serialization!r} is invalid: use one of {', '.join(SERIALIZATIONS)}")
        if serialization == PICKLE:
            if not allow_pickle:
                raise HttpError(415, "pickle is not enabled on this deployment: send JSON arguments, or start the "
                                     "job with TRAINPLANE_ALLOW_PICKLE=true (token-holding peers only)")
            payload = data.get("payload")
            if not isinstance(payload, str):
                raise HttpError(400, "payload must be a base64 string for serialization 'pickle'")
            return cls(fn, PICKLE, payload=payload)
        args, kwargs = data.get("args", []), data.get("kwargs", {})
        if not isinstance(args, list):
            raise HttpError(400, f"args must be a JSON list, got {type(args).__name__}")
        if not isinstance(kwargs, dict):
            raise HttpError(400, f"kwargs must be a JSON object, got {type(kwargs).__name__}")
        return cls(fn, JSON, tuple(args), kwargs)

    def arguments(self) -> tuple[tuple[Any, ...], Mapping[str, Any]]:
        """Positional and keyword arguments, unpickled for ``pickle`` (only after the agent accepted it).

        Raises:
            ValueError: a pickled payload is not an ``(args, kwargs)`` pair.
        """
        if self.serialization == PICKLE:
            return unpack_pickled_arguments(self.payload)
        return self.args, self.kwargs

    def resolve(self) -> Callable[..., Any]:
        """Import the module and walk the qualified name.

        Raises:
            ImportError: the module cannot be imported.
            AttributeError: the module has no such attribute.
            TypeError: the object found is not callable.
        """
        module_name, _, qualname = self.fn.partition(":")
        target: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            target = getattr(target, part)
        if not callable(target):
            raise TypeError(f"{self.fn} is a {type(target).__name__}, not a callable")
        return target


@dataclass(frozen=True)
class CallRequest:
    """A ``POST /call`` body.

    Attributes:
        invocation: what to run.
        timeout: seconds the call may take, or ``None`` for no deadline.
        workers: node ranks to run on (ascending, distinct), or ``None`` for every node that runs processes.
        output: the caller's key for the call's output, or ``""`` when it does not want it.
        code: the digest of the synced tree the call imports from, or ``""``.
    """

    invocation: Invocation
    timeout: Optional[float]
    workers: Optional[tuple[int, ...]]
    output: str = ""
    code: str = ""

    @classmethod
    def from_json(cls, data: Mapping[str, Any], allow_pickle: bool) -> CallRequest:
        """Validate a ``/call`` body.

        Raises:
            HttpError: 400 naming the bad field; 415 for pickle when it is not enabled.
        """
        workers = data.get("workers")
        if workers is not None:
            if not isinstance(workers, list) or not all(_is_int(w) and w >= 0 for w in workers) or not workers:
                raise HttpError(400, f"workers={workers!r} is invalid: use a non-empty list of node ranks, or null")
            workers = tuple(sorted(set(workers)))
        output = "" if data.get("output") is None else parse_key(data["output"])
        return cls(Invocation.from_json(data, allow_pickle), parse_timeout(data.get("timeout")), workers, output,
                   parse_code(data.get("code")))


@dataclass(frozen=True)
class ExecRequest:
    """A ``POST /exec`` body: run on the receiver and forward to its subtree.

    Attributes:
        call_id: identifies the call on every node (for cancellation).
        generation: the world generation the call was planned against.
        invocation: what to run.
        timeout: seconds this node has left, or ``None``.
        nodes: node ranks of the receiver's subtree, the receiver first.
        fanout: at most this many children per node below the receiver.
        output: the caller's key for the call's output (each node sends its ranks' to the
            coordinator), or ``""``.
        code: the digest of the synced tree the call imports from, or ``""``.
    """

    call_id: str
    generation: int
    invocation: Invocation
    timeout: Optional[float]
    nodes: tuple[int, ...]
    fanout: int
    output: str = ""
    code: str = ""

    def bodies(self, subtrees: Sequence[Sequence[int]], timeout: Optional[float]) -> list[bytes]:
        """The encoded ``/exec`` bodies that send this call on to one child per subtree: each the
        request with that subtree as ``nodes`` (the child first) and ``timeout`` seconds left;
        :meth:`from_json` of one reads it back. Everything but ``nodes`` is encoded once, however many
        children (the invocation's arguments may be megabytes).
        """
        head = json.dumps({"call_id": self.call_id, "generation": self.generation,
                           "invocation": self.invocation.to_json(), "timeout": timeout, "fanout": self.fanout,
                           **({"output": self.output} if self.output else {}),
                           **({"code": self.code} if self.code else {})})
        return [f'{head[:-1]}, "nodes": {json.dumps(list(subtree))}}}'.encode() for subtree in subtrees]

    @classmethod
    def from_json(cls, data: Mapping[str, Any], allow_pickle: bool) -> ExecRequest:
        """Validate an ``/exec`` body.

        Raises:
            HttpError: 400 naming the bad field; 415 for pickle when it is not enabled.
        """
        fields: list[Any] = [data.get(k) for k in ("call_id", "generation", "nodes", "fanout")]
        call_id, generation, nodes, fanout = fields
        if not isinstance(call_id, str) or not call_id:
            raise HttpError(400, "call_id must be a non-empty string")
        if not _is_int(generation):
            raise HttpError(400, f"generation={generation!r} is invalid: use a whole number")
        if not isinstance(nodes, list) or not nodes or not all(_is_int(n) and n >= 0 for n in nodes):
            raise HttpError(400, f"nodes={nodes!r} is invalid: use a non-empty list of node ranks")
        if not _is_int(fanout) or fanout < 1:
            raise HttpError(400, f"fanout={fanout!r} is invalid: use 1 or more")
        invocation = data.get("invocation")
        if not isinstance(invocation, dict):
            raise HttpError(400, "invocation must be a JSON object")
        output = "" if data.get("output") is None else parse_key(data["output"])
        return cls(call_id, generation, Invocation.from_json(invocation, allow_pickle),
                   parse_timeout(data.get("timeout")), tuple(nodes), fanout, output, parse_code(data.get("code")))


def parse_code(value: Any) -> str:
    """A call's ``code``: ``None`` (none), or a tree digest.

    Raises:
        HttpError: 400 for anything else.
    """
    if value is None:
        return ""
    try:
        return check_digest(value)
    except ArchiveError as exc:
        raise HttpError(400, f"code: {exc}") from None


def parse_timeout(value: Any) -> Optional[float]:
    """A call timeout: ``None``, or a finite number of seconds > 0.

    Raises:
        HttpError: 400 for anything else.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise HttpError(400, f"timeout={value!r} is invalid: use seconds > 0, or null for none")
    return float(value)


STR_FAILED = "<exception str() failed>"
"""The message of an exception whose ``str()`` raises: the placeholder ``traceback`` prints for it."""
MAX_MESSAGE = 64 * 1024
"""Most characters of an exception's message that travel; the rest is cut, saying so."""
MAX_TRACEBACK = 256 * 1024
"""Most characters of a remote traceback that travel (its end, where the exception is, is kept)."""
_HIDDEN_FRAMES = ("<frozen runpy>", "<frozen importlib._bootstrap", "<frozen zipimport>")
"""Frames of the interpreter's own machinery that a remote traceback leaves out (as Python does for imports)."""


def remote_error(exc: BaseException, rank: int, node_rank: int, fn: str, tree: str = "") -> RemoteError:
    """Describe an exception a rank's call raised; never raises itself, whatever ``exc`` does.

    The traceback starts at the user's code: each exception of the chain (``__cause__``,
    ``__context__``) loses its leading frames from the runtime's own files and the interpreter's
    import and ``runpy`` machinery, and the synced tree's directory is left out of file names (they are
    relative to the caller's import root, as in the caller's project).

    Args:
        exc: the exception, with ``__traceback__`` as raised.
        rank: global rank of the process.
        node_rank: its node's rank.
        fn: the callable, ``module:qualname``.
        tree: the synced tree directory the call imported from, or ``""``.

    Returns:
        A RemoteError with the exception's qualified type name, its message (:data:`STR_FAILED` when
        ``str()`` fails, as ``traceback`` prints it; cut past :data:`MAX_MESSAGE`) and traceback.
    """
    cls = type(exc)
    name = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    try:
        message = str(exc)
    except Exception:
        message = STR_FAILED
    if not isinstance(message, str):
        message = STR_FAILED
    try:
        text = format_remote_traceback(exc, tree)
    except Exception as failure:  # a traceback that cannot be formatted still leaves the error itself
        text = f"(the traceback could not be formatted: {type(failure).__name__})\n{name}: {message}\n"
    return RemoteError(rank, node_rank, name, _cut(message, MAX_MESSAGE, head=True), _cut(text, MAX_TRACEBACK), fn)


def format_remote_traceback(exc: BaseException, tree: str = "") -> str:
    """``exc``'s formatted traceback and chain, each part starting at the user's code (:func:`remote_error`)."""
    formatted = traceback.TracebackException.from_exception(exc)
    pending, seen = [formatted], set()
    while pending:
        part = pending.pop()
        if id(part) in seen:
            continue
        seen.add(id(part))
        frames = [f for f in part.stack if not f.filename.startswith(_HIDDEN_FRAMES)]
        first = 0  # all of them when the runtime raised it (a call that does not fit the method's signature)
        while first < len(frames) and frames[first].filename.startswith(_RUNTIME_DIR):
            first += 1
        part.stack = traceback.StackSummary.from_list(frames[first:])
        pending.extend(p for p in (part.__cause__, part.__context__) if p is not None)
        pending.extend(getattr(part, "exceptions", None) or ())  # an ExceptionGroup's members
    text = "".join(formatted.format())
    return text.replace(tree.rstrip(os.sep) + os.sep, "") if tree else text


def _cut(text: str, limit: int, head: bool = False) -> str:
    """``text`` cut to about ``limit`` characters (its start with ``head``, else its end), saying how much went."""
    if len(text) <= limit:
        return text
    note = f" ... ({len(text) - limit} characters cut) ... "
    return text[:limit] + note if head else note + text[-limit:]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
