"""Nodes a tree parent suspects are gone, on their way up to the coordinator with its next beat. Standard library
only.

A tree parent hears its children; the coordinator does not. When a child's agent port says its agent is gone (the
parent's ``watch`` of its tree children: refused, reset, closed by its side), or a call or push to the child is
refused, the parent notes the child here and beats at once. The beat carries :data:`SUSPECTS` (node id to why);
every parent above passes them on with its own beat, and the coordinator probes each at once
(``Coordinator.suspect``), as it does its own direct reporters. The probe decides, so a suspicion alone loses no
node and the fencing rules hold.
"""

from __future__ import annotations

import threading
from typing import Mapping

SUSPECTS = "suspects"
"""The heartbeat body's field: an object of node id (as a string) to why it is suspected."""
MAX_REASON = 300
"""Characters of a reason kept (the rest is cut)."""


class Suspicions:
    """The suspects a node has not yet passed up (thread-safe: its watch, its call hops and its HTTP handlers note
    them, its heartbeat thread takes them)."""

    def __init__(self) -> None:
        self._held: dict[int, str] = {}
        self._lock = threading.Lock()

    def merge(self, suspects: Mapping[int, str]) -> None:
        """Hold ``suspects`` (node id to why) for the next beat; a node held already keeps its first reason."""
        with self._lock:
            for node_id, reason in suspects.items():
                self._held.setdefault(node_id, reason[:MAX_REASON])

    def take(self) -> dict[int, str]:
        """Everything held, which is held no more (merged back if the beat carrying it fails)."""
        with self._lock:
            held, self._held = self._held, {}
        return held


def parse(value: object) -> dict[int, str]:
    """A beat's :data:`SUSPECTS` (absent: none).

    Raises:
        ValueError: it is not an object of node ids (digits) to strings.
    """
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and k.isdigit() and isinstance(v, str)
                                              for k, v in value.items()):
        raise ValueError(f"{SUSPECTS} must map node ids to reasons")
    return {int(k): _printable(v) for k, v in value.items()}


def _printable(reason: str) -> str:
    """``reason`` cut to :data:`MAX_REASON` characters, each control character a space (it goes into the
    coordinator's log and a world's message: one line, forged by nobody)."""
    return "".join(c if c.isprintable() else " " for c in reason[:MAX_REASON])
