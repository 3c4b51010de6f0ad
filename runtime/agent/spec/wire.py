"""How service-mode values and errors travel as JSON. Standard library only.

Arguments and results
    ``json`` (default): arguments are a JSON list and object, each rank's result a JSON value.
    ``pickle`` (opt-in per deployment, ``TRAINPLANE_ALLOW_PICKLE``): arguments travel as one base64
    string of ``pickle.dumps((args, kwargs))`` and each result as a base64 pickle. Agents forward these
    strings untouched; only the worker processes (arguments) and the client (results) unpickle, and an
    agent refuses pickled arguments unless its deployment opted in and the sender held the job token.

Errors
    A failed exchange answers with a non-2xx status and the JSON object::

        {"error": "<human-readable message>", "kind": "<kind>", "detail": {<fields>}}

    ``kind`` and status per exception (``detail`` holds the constructor's named arguments):

    ====================  ======  ==========================================================
    kind                  status  exception and detail fields
    ====================  ======  ==========================================================
    remote_error          500     RemoteError: rank, node_rank, exc_type, message,
                                  remote_traceback, fn
    call_timeout          504     CallTimeout: timeout, pending_ranks, fn, detail
    cancelled             409     CallCancelled: (message only)
    node_failed           502     NodeFailed: node_rank, address, reason, status
    membership_changed    409     WorkerMembershipChanged: added_ips, removed_ips,
                                  previous_ips, current_ips, generation
    job_ended             410     JobEnded: status, reason, exit_code
    ====================  ======  ==========================================================

    Errors from the transport itself (401, 400, 404, 411, 413, 415) carry ``error`` only, as every
    agent route does.
"""

from __future__ import annotations

import base64
import inspect
import json
import pickle
from typing import Any, Mapping, Optional, Sequence

from runtime.agent.errors import (
    CallCancelled,
    CallTimeout,
    JobEnded,
    NodeFailed,
    RemoteError,
    TrainplaneError,
    WorkerMembershipChanged,
)

JSON = "json"
PICKLE = "pickle"
SERIALIZATIONS = (JSON, PICKLE)
UNSENDABLE = "which no serialization can send"
"""In :func:`json_problem`'s answer for a value pickle cannot send either (a generator)."""

_KINDS: dict[str, tuple[type[TrainplaneError], int, tuple[str, ...]]] = {
    "remote_error": (RemoteError, 500, ("rank", "node_rank", "exc_type", "message", "remote_traceback", "fn")),
    "call_timeout": (CallTimeout, 504, ("timeout", "pending_ranks", "fn", "detail")),
    "cancelled": (CallCancelled, 409, ()),
    "node_failed": (NodeFailed, 502, ("node_rank", "address", "reason", "status")),
    "job_ended": (JobEnded, 410, ("status", "reason", "exit_code")),
    "membership_changed": (
        WorkerMembershipChanged, 409, ("added_ips", "removed_ips", "previous_ips", "current_ips", "generation"),
    ),
}


def error_status(exc: TrainplaneError) -> int:
    """The HTTP status an error travels with (500 for a type without a kind)."""
    for cls, status, _ in _KINDS.values():
        if type(exc) is cls:
            return status
    return 500


def error_body(exc: TrainplaneError) -> dict[str, Any]:
    """The JSON object for ``exc`` (module docstring)."""
    for kind, (cls, _, fields) in _KINDS.items():
        if type(exc) is cls:
            detail = {f: _jsonable(getattr(exc, f)) for f in fields}
            return {"error": str(exc), "kind": kind, "detail": detail}
    return {"error": str(exc)}


def error_from_body(body: Mapping[str, Any]) -> Optional[TrainplaneError]:
    """Rebuild the exception an error body describes.

    Returns:
        The exception, or ``None`` when the body has no known ``kind`` (a transport-level error, or a
        malformed body): the caller decides what that means on its hop.
    """
    entry = _KINDS.get(str(body.get("kind", "")))
    if entry is None:
        return None
    cls, _, fields = entry
    if not fields:
        return cls(str(body.get("error", "")))
    detail = body.get("detail")
    if not isinstance(detail, Mapping):
        return None
    try:
        return cls(**{f: detail[f] for f in fields})
    except (KeyError, TypeError, ValueError):
        return None


def pack_arguments(args: tuple[Any, ...], kwargs: Mapping[str, Any], serialization: str) -> dict[str, Any]:
    """The argument fields of a call body.

    Raises:
        ValueError: unknown serialization.
        pickle.PicklingError, TypeError: (``pickle``) an argument cannot be pickled. With ``json``, an
            argument that is not JSON-serialisable fails later, when the body is encoded.
    """
    if serialization == JSON:
        return {"args": list(args), "kwargs": dict(kwargs)}
    if serialization == PICKLE:
        return {"payload": _b64(pickle.dumps((tuple(args), dict(kwargs))))}
    raise ValueError(f"serialization {serialization!r}: use one of {', '.join(SERIALIZATIONS)}")


def unpack_pickled_arguments(payload: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Arguments from a pickled payload. Call only for an authenticated, opted-in deployment.

    Raises:
        ValueError: the payload is not base64 of a pickled ``(args, kwargs)`` pair.
    """
    try:
        args, kwargs = pickle.loads(base64.b64decode(payload, validate=True))  # noqa: S301 - see module docstring
    except Exception as exc:  # unpickling arbitrary bytes can raise almost anything
        raise ValueError(f"pickled arguments are not an (args, kwargs) pair: {exc}") from exc
    if not isinstance(args, tuple) or not isinstance(kwargs, dict):
        raise ValueError("pickled arguments are not an (args, kwargs) pair")
    return args, kwargs


def json_problem(value: Any, name: str) -> Optional[str]:
    """What in ``value`` JSON would not carry as it is, or ``None`` when it is plain JSON data.

    JSON has one sequence type and string keys only: ``json.dumps`` turns a tuple into a list and a
    key ``1`` into ``"1"`` (and two keys ``1`` and ``"1"`` into one) without a word. Such a value is
    refused rather than changed.

    Args:
        value: the value to travel (a result, or an argument).
        name: what it is called in the answer, e.g. ``"the result"`` or ``"argument 0"``.

    Returns:
        e.g. ``the result['pair'] is a tuple: JSON has lists only ...; use a list``, naming the first
        place, or ``None``.
    """
    stack: list[tuple[Any, str]] = [(value, name)]
    seen: set[int] = set()  # containers checked (or being checked): shared ones once, a cycle ends
    while stack:
        item, where = stack.pop()
        if item is None or isinstance(item, (str, bool, int, float)):
            continue
        if isinstance(item, (list, dict)):
            if id(item) in seen:
                continue
            seen.add(id(item))
        if isinstance(item, list):
            stack.extend((v, f"{where}[{i}]") for i, v in reversed(list(enumerate(item))))
        elif isinstance(item, dict):
            for key, v in item.items():
                if not isinstance(key, str):
                    return (f"{where} has the key {key!r} ({type(key).__name__}): JSON keys are strings (json would "
                            f"turn it into {json.dumps(str(key))}); use string keys")
                stack.append((v, f"{where}[{key!r}]"))
        elif isinstance(item, tuple):
            return f"{where} is a tuple: JSON has lists only (it would arrive as a list); use a list"
        elif inspect.isgenerator(item) or inspect.isasyncgen(item) or inspect.iscoroutine(item):
            kind = "coroutine" if inspect.iscoroutine(item) else "generator"
            return (f"{where} is a {kind}, {UNSENDABLE} (pickle neither): a call answers one value per rank; make "
                    f"it a list (list(...)) or await it there")
        else:
            return f"{where} is a {type(item).__module__}.{type(item).__qualname__}, which JSON cannot carry"
    return None


def check_json_arguments(fn: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    """Refuse arguments JSON would not carry as they are (``wire.json_problem``), before anything is sent.

    Raises:
        TypeError: names the first such argument, what is wrong and the fix.
    """
    named = [(value, f"argument {i}") for i, value in enumerate(args)]
    named += [(value, f"keyword argument {key}") for key, value in kwargs.items()]
    for value, name in named:
        problem = json_problem(value, name)
        if problem is not None:
            hint = "" if UNSENDABLE in problem else "; or use serialization='pickle' with a deployment that allows it"
            raise TypeError(f"arguments of {fn} are not JSON-serialisable as they are: {problem}{hint}")


def pack_result(value: Any, serialization: str) -> Any:
    """One rank's result as it travels: the value itself (``json``) or a base64 pickle."""
    return _b64(pickle.dumps(value)) if serialization == PICKLE else value


def unpack_result(value: Any, serialization: str) -> Any:
    """Reverse :func:`pack_result` (client side)."""
    return pickle.loads(base64.b64decode(value)) if serialization == PICKLE else value  # noqa: S301


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _jsonable(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value
