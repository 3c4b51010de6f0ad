"""A failed service job's coordinator keeps answering for a while, so that its clients learn why the job
ended (``JobEnded``, ``GET /info``) instead of finding nobody there. Standard library only."""

from __future__ import annotations

import queue
from typing import Callable

from runtime.agent.rendezvous.events import SignalReceived
from runtime.agent.spec.signals import STOP_SIGNALS

ENDED_LINGER = 10.0
"""Seconds a failed service job's coordinator keeps telling clients why the job ended."""


def linger(get: Callable[[float], object], clock: Callable[[], float], say: Callable[[str], None]) -> None:
    """Keep the agent up for :data:`ENDED_LINGER` seconds of ``clock``, or until a stop signal arrives.

    Args:
        get: the agent loop's next event within that many seconds (raises ``queue.Empty`` when none came).
        clock: monotonic clock, seconds.
        say: writes one line to the agent's log.
    """
    say(f"telling clients why the job ended for {ENDED_LINGER:g} s")
    deadline = clock() + ENDED_LINGER
    while clock() < deadline:
        try:
            item = get(max(0.0, deadline - clock()))
        except queue.Empty:
            return
        if isinstance(item, SignalReceived) and item.signum in STOP_SIGNALS:
            return
