"""The agent loop's queue (``events.Inbox``): oldest first, a wait that gives up, taking out the coordinator's
decisions while the node's own events keep their order, and a look at the worlds waiting (what the agent does while
its ranks are slow to stop, and before it starts the next generation)."""

from __future__ import annotations

import queue
import threading

import pytest

from runtime.agent.rendezvous.events import Inbox, Tick

pytestmark = pytest.mark.unit


def test_items_come_oldest_first_and_an_empty_wait_raises_empty() -> None:
    inbox: Inbox[object] = Inbox()
    inbox.put("a")
    inbox.put("b")
    assert (inbox.get(0.0), inbox.get(0.0)) == ("a", "b") and inbox.empty()
    with pytest.raises(queue.Empty):
        inbox.get(0.01)


def test_take_removes_only_the_items_of_one_type_and_the_rest_keep_their_order() -> None:
    inbox: Inbox[object] = Inbox()
    first, second = Tick(), Tick()
    for item in ("a", first, "b", second, "c"):
        inbox.put(item)
    taken = inbox.take(Tick)
    assert taken == [first, second] and taken[0] is first
    assert [inbox.get(0.0) for _ in range(3)] == ["a", "b", "c"] and inbox.take(Tick) == []


def test_waiting_shows_the_items_and_leaves_them_in_place() -> None:
    inbox: Inbox[object] = Inbox()
    tick = Tick()
    for item in ("a", tick, "b"):
        inbox.put(item)
    assert inbox.waiting() == ["a", tick, "b"]
    assert [inbox.get(0.0) for _ in range(3)] == ["a", tick, "b"] and inbox.waiting() == []


def test_a_waiting_get_wakes_for_an_item_put_by_another_thread() -> None:
    inbox: Inbox[str] = Inbox()
    threading.Timer(0.05, inbox.put, args=("late",)).start()
    assert inbox.get(30.0) == "late"
