"""A call's output log on the coordinator: reads, long polls, the end, the cap, bad bodies."""

from __future__ import annotations

import threading

import pytest

from runtime.agent.errors import HttpError
from runtime.agent.service.output_relay import CallOutputs

pytestmark = pytest.mark.unit


def test_reads_page_through_the_log_and_see_its_end():
    outputs = CallOutputs()
    outputs.open("k")
    outputs.append("k", [(0, "stdout", "a\n"), (1, "stderr", "b")])

    first = outputs.read("k", 0, 0.0)
    outputs.append("k", [(0, "stdout", "c\n")])
    outputs.close("k")
    outputs.append("k", [(0, "stdout", "after the end\n")])

    assert first == {"chunks": [[0, "stdout", "a\n"], [1, "stderr", "b"]], "next": 2, "done": False, "known": True}
    assert outputs.read("k", 2, 0.0) == {"chunks": [[0, "stdout", "c\n"]], "next": 3, "done": True, "known": True}
    assert outputs.read("never", 0, 0.0) == {"chunks": [], "next": 0, "done": False, "known": False}


def test_a_long_poll_returns_as_soon_as_output_arrives():
    """The reader's clock never moves, so its wait can end only by the append waking it; the append
    runs once the reader is waiting (it takes the lock the reader releases only in its wait), and the
    reader read its clock twice (its deadline, then once before its one wait): the first wait ended
    by the wake-up, not by a timeout."""
    waiting = threading.Event()
    ticks: list[float] = []

    def clock() -> float:
        ticks.append(0.0)
        if len(ticks) == 2:
            waiting.set()
        return 0.0

    outputs = CallOutputs(clock=clock)
    outputs.open("k")
    pages: list[dict] = []
    reader = threading.Thread(target=lambda: pages.append(outputs.read("k", 0, 5.0)), daemon=True)
    reader.start()
    waiting.wait()

    outputs.append("k", [(2, "stdout", "x\n")])
    reader.join()

    assert pages[0]["chunks"] == [[2, "stdout", "x\n"]]
    assert len(ticks) == 2


def test_a_calls_log_is_capped_and_says_so():
    outputs = CallOutputs(limit=10)
    outputs.open("k")

    kept = outputs.append("k", [(0, "stdout", "12345"), (0, "stdout", "67890"), (0, "stdout", "over")])

    chunks = outputs.read("k", 0, 0.0)["chunks"]
    assert kept == 2 and [c[2] for c in chunks[:2]] == ["12345", "67890"]
    assert "output is over" in chunks[2][2] and len(chunks) == 3


@pytest.mark.parametrize(("body", "message"), [
    ({"output": "../x"}, r"output='../x' is invalid"),
    ({"output": "k", "chunks": [[0, "stdin", "x"]]}, r"chunk \[0, 'stdin', 'x'\] is invalid"),
    ({"output": "k", "after": -1}, r"after=-1 is invalid"),
    ({"output": "k", "wait": 60}, r"wait=60 is invalid: use 0 to 5 seconds"),
])
def test_bad_bodies_are_refused_naming_the_field(body, message: str):
    with pytest.raises(HttpError, match=message):
        CallOutputs().route(body)
