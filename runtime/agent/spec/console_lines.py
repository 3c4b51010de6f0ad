"""The console's line format, which the agents' console (``runtime.agent.execution.console``) and the
workflow API's printer of the ranks' output (``runtime.workflow.printer``) share: every line carries its
writer's prefix, ``\\r`` redraws (a progress bar) included, and a writer whose unfinished line another
writer ended goes on at a line's start. Standard library only."""

from __future__ import annotations

import re

START, MID, AFTER_CR = 0, 1, 2
"""Where a writer's line stands: at its start (the prefix is due), within it, or just after a ``\\r``
(the cursor back at the line's start: the prefix is due again before more text, not before ``\\n``)."""
_PIECES = re.compile(rb"\r\n|\n|\r|[^\r\n]+")


def render(data: bytes, prefix: bytes, state: int) -> tuple[bytes, int]:
    """``data`` as the console shows it: ``prefix`` before every line's text and after every ``\\r``
    that more text follows (a redraw keeps its prefix), none inside ``\\r\\n``.

    Args:
        data: what the writer wrote, in the order written.
        prefix: the writer's prefix, e.g. ``b"[rank 3] "``.
        state: the writer's :data:`START`, :data:`MID` or :data:`AFTER_CR` before ``data``.

    Returns:
        The bytes to write, and the writer's state after them.
    """
    out: list[bytes] = []
    for match in _PIECES.finditer(data):
        piece = match.group()
        if piece.endswith(b"\n"):
            if state == START:
                out.append(prefix)
            out.append(piece)
            state = START
        elif piece == b"\r":
            out.append(piece)
            state = START if state == START else AFTER_CR
        else:
            if state != MID:
                out.append(prefix)
            out.append(piece)
            state = MID
    return b"".join(out), state


def resume(data: bytes, state: int) -> tuple[bytes, int]:
    """A writer's next ``data`` and state once another writer has written since it (and so ended its
    unfinished line, if it had one): at a line's start, without the line end ``data`` begins with,
    which was written for it; as they are when its line was not open."""
    if state == START:
        return data, state
    return (data[2:] if data.startswith(b"\r\n") else data[data.startswith(b"\n"):]), START
