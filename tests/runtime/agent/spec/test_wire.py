"""The wire format: every error kind survives the trip, and call bodies are validated with 400/415."""

from __future__ import annotations

import json
import pickle
from dataclasses import replace

import pytest

from runtime.agent.errors import (
    CallCancelled,
    CallTimeout,
    HttpError,
    NodeFailed,
    RemoteError,
    TrainplaneError,
    WorkerMembershipChanged,
)
from runtime.agent.service.calls import CallRequest, ExecRequest, Invocation, parse_timeout
from runtime.agent.spec.wire import (
    error_body,
    error_from_body,
    error_status,
    pack_arguments,
    pack_result,
    unpack_pickled_arguments,
    unpack_result,
)

pytestmark = pytest.mark.unit

ERRORS = [
    (RemoteError(5, 2, "ValueError", "bad value", "Traceback...\nValueError: bad value\n", "pkg.mod:fn"), 500),
    (CallTimeout(2.5, [7, 3], "pkg.mod:fn"), 504),
    (CallCancelled("call abc cancelled by its parent"), 409),
    (NodeFailed(3, "10.0.0.4:32300", "connection refused", None), 502),
    (WorkerMembershipChanged(["10.0.0.9"], ["10.0.0.3"], ["10.0.0.1", "10.0.0.3"], ["10.0.0.1", "10.0.0.9"], 4), 409),
]


@pytest.mark.parametrize(("error", "status"), ERRORS, ids=lambda e: type(e).__name__)
def test_errors_round_trip_through_json_and_pickle(error: TrainplaneError, status: int):
    body = error_body(error)
    assert error_status(error) == status
    assert body["error"] == str(error)
    for rebuilt in (error_from_body(body), pickle.loads(pickle.dumps(error))):  # noqa: S301 - our own bytes
        assert type(rebuilt) is type(error)
        assert str(rebuilt) == str(error)
        assert vars(rebuilt) == vars(error)


def test_remote_error_names_rank_node_type_message_and_traceback():
    error = RemoteError(5, 2, "ValueError", "bad value", "Traceback...\n", "pkg.mod:fn")
    assert "pkg.mod:fn raised ValueError on rank 5 (node rank 2): bad value" in str(error)
    assert "Traceback..." in str(error)


def test_membership_change_is_computed_from_address_lists():
    change = WorkerMembershipChanged.between(["a", "b", "c"], ["a", "c", "d"], 7)
    assert change.added_ips == ("d",) and change.removed_ips == ("b",)
    assert change.previous_ips == ("a", "b", "c") and change.current_ips == ("a", "c", "d")
    assert change.generation == 7


@pytest.mark.parametrize("body", [{"error": "plain"}, {"kind": "nope"}, {"kind": "remote_error", "detail": {}},
                                  {"kind": "call_timeout", "detail": "x"}])
def test_bodies_without_a_known_kind_are_left_to_the_caller(body):
    assert error_from_body(body) is None


def test_pickled_arguments_and_results_round_trip():
    fields = pack_arguments((1, {2}), {"k": b"v"}, "pickle")
    assert set(fields) == {"payload"}
    assert unpack_pickled_arguments(fields["payload"]) == ((1, {2}), {"k": b"v"})
    assert unpack_result(pack_result({3, 4}, "pickle"), "pickle") == {3, 4}
    assert pack_arguments((1,), {"a": 2}, "json") == {"args": [1], "kwargs": {"a": 2}}


@pytest.mark.parametrize("payload", ["not base64!", "aGVsbG8=", pack_arguments((1,), {}, "pickle")["payload"][:-4]])
def test_malformed_pickled_arguments_are_a_value_error(payload: str):
    with pytest.raises(ValueError, match="pickled arguments"):
        unpack_pickled_arguments(payload)


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        ({"fn": "no_colon"}, 400, "fn='no_colon'"),
        ({"fn": "pkg.mod:fn; rm -rf"}, 400, "module:qualname"),
        ({"fn": 3}, 400, "fn=3"),
        ({"fn": "m:f", "args": {"a": 1}}, 400, "args must be a JSON list"),
        ({"fn": "m:f", "kwargs": [1]}, 400, "kwargs must be a JSON object"),
        ({"fn": "m:f", "serialization": "yaml"}, 400, "serialization='yaml'"),
        ({"fn": "m:f", "serialization": "pickle", "payload": "x"}, 415, "pickle is not enabled"),
        ({"fn": "m:f", "timeout": -1}, 400, "timeout=-1"),
        ({"fn": "m:f", "timeout": "10"}, 400, "timeout='10'"),
        ({"fn": "m:f", "workers": []}, 400, "workers=[]"),
        ({"fn": "m:f", "workers": [1, -2]}, 400, "workers=[1, -2]"),
        ({"fn": "m:f", "workers": [True]}, 400, "workers=[True]"),
    ],
)
def test_bad_call_bodies_are_refused_with_the_field(body, status: int, fragment: str):
    with pytest.raises(HttpError, match=r"invalid|must|not enabled") as info:
        CallRequest.from_json(body, allow_pickle=False)
    assert info.value.status == status
    assert fragment in str(info.value)


def test_a_valid_call_body():
    call = CallRequest.from_json({"fn": "pkg.mod:Cls.method", "args": [1], "kwargs": {"x": 2}, "timeout": 3,
                                  "workers": [2, 0, 2]}, allow_pickle=False)
    assert call.invocation == Invocation("pkg.mod:Cls.method", "json", (1,), {"x": 2})
    assert call.timeout == 3.0 and call.workers == (0, 2)
    assert parse_timeout(None) is None


@pytest.mark.parametrize("invocation", [Invocation("m:f", "pickle", payload="cGF5"),
                                        Invocation("m:f", "json", ("x", [1, {"y": None}]), {"k": "}\"{"})])
def test_exec_bodies_round_trip_with_each_childs_subtree_and_time_left(invocation: Invocation):
    request = ExecRequest("id1", 3, invocation, 1.5, (4, 5, 6, 7, 8), 2)
    bodies = request.bodies([(5, 6), (7, 8)], 1.25)
    children = [ExecRequest.from_json(json.loads(body), allow_pickle=True) for body in bodies]
    assert children == [replace(request, nodes=(5, 6), timeout=1.25), replace(request, nodes=(7, 8), timeout=1.25)]
    [no_deadline] = request.bodies([(6,)], None)
    assert ExecRequest.from_json(json.loads(no_deadline), allow_pickle=True).timeout is None


def test_a_pickled_exec_needs_the_opt_in():
    [body] = ExecRequest("id1", 3, Invocation("m:f", "pickle", payload="cGF5"), 1.5, (4, 5), 2).bodies([(5,)], 1.0)
    with pytest.raises(HttpError) as info:
        ExecRequest.from_json(json.loads(body), allow_pickle=False)
    assert info.value.status == 415


def test_invocation_resolves_qualified_names_and_rejects_non_callables():
    assert Invocation("os.path:join").resolve()("a", "b") == "a/b"
    with pytest.raises(TypeError, match="not a callable"):
        Invocation("os:sep").resolve()
    with pytest.raises(ModuleNotFoundError):
        Invocation("no_such_module_xyz:f").resolve()
