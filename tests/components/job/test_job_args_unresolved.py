"""DistributedJobArgs and unresolved inputs: a Pulumi Output or other awaitable is refused where it decides
the job's shape, and elsewhere kept as one output to check when its value is known."""

from __future__ import annotations

from typing import Any, Callable, Generator

import pulumi
import pytest

from components.errors import InvalidJobArgs
from components.job.naming import validate_job_name
from tests.components.componenttest import job_args
from tests.components.job.jobargerrors import assert_names_field_value_and_fix

pytestmark = pytest.mark.unit


class Pending:
    """An awaitable that is not a pulumi Output (a Pulumi ``Input`` may be any awaitable)."""

    def __await__(self) -> Generator[None, None, str]:
        yield
        return "x"


PLAIN_FIX = "it decides what the job renders, which Pulumi must know when the job is created"
UNRESOLVED = {
    # What a program may pass: a resource's output (e.g. a Namespace's name), or any other awaitable.
    "output": (lambda: pulumi.Output.from_input("training"), "a pulumi Output"),
    "awaitable": (Pending, "an awaitable"),
}


@pytest.mark.parametrize("kind", UNRESOLVED)
@pytest.mark.parametrize(
    ("place", "field", "plain"),
    [
        (lambda bad: {"workers": bad}, "workers", "int"),
        (lambda bad: {"num_proc": bad}, "num_proc", "int or str"),
        (lambda bad: {"script": bad}, "script", "str"),
        (lambda bad: {"mode": bad}, "mode", "str"),
        (lambda bad: {"gpus": bad}, "gpus", "int"),
        (lambda bad: {"memory": bad}, "memory", "str"),
        (lambda bad: {"agent_port": bad}, "agent_port", "int"),
        (lambda bad: {"script": None, "command": ["/opt/train", bad]}, "command[1]", "value"),
    ],
)
def test_outputs_and_awaitables_are_rejected_where_they_decide_the_shape(
    kind: str, place: Callable[[Any], dict[str, Any]], field: str, plain: str
) -> None:
    make, described = UNRESOLVED[kind]
    bad = make()
    with pytest.raises(InvalidJobArgs) as info:
        job_args(**place(bad))
    assert info.value.value is bad
    assert_names_field_value_and_fix(info.value, field, bad, f"is {described}, whose value is not known",
                                     f"pass a plain {plain}; {PLAIN_FIX}")


@pytest.mark.parametrize("kind", UNRESOLVED)
@pytest.mark.parametrize(
    ("place", "field"),
    [
        (lambda value: {"namespace": value}, "namespace"),
        (lambda value: {"image": value}, "image"),
        (lambda value: {"gang_scheduler": "volcano", "queue": value}, "queue"),
        (lambda value: {"args": value}, "args"),
        (lambda value: {"args": ["--lr", value]}, "args"),
        (lambda value: {"env": {"NCCL_DEBUG": value}}, "env"),
        (lambda value: {"tolerations": [{"key": value}]}, "tolerations"),
        (lambda value: {"service_account": value}, "service_account"),
    ],
)
def test_an_unresolved_input_is_kept_as_one_output_to_check_when_known(
    kind: str, place: Callable[[Any], dict[str, Any]], field: str
) -> None:
    """Checking it, when Pulumi knows its value, is ``test_job_inputs.py``'s."""
    args = job_args(**place(UNRESOLVED[kind][0]()))
    assert isinstance(getattr(args, field), pulumi.Output)


def test_an_output_job_name_is_rejected_as_such() -> None:
    name = pulumi.Output.from_input("demo")
    with pytest.raises(InvalidJobArgs) as info:
        validate_job_name(name, job_args())  # type: ignore[arg-type]
    assert_names_field_value_and_fix(info.value, "name", name, "is a pulumi Output",
                                     f"pass a plain str; {PLAIN_FIX}")
