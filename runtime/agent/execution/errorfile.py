"""A rank's ``TORCHELASTIC_ERROR_FILE``: what torch's ``@record`` wrote about the exception that
ended it, read for the root-cause report. Standard library only.

The format is torch's ``ErrorHandler.record_exception`` (torch 2.13.0,
``torch/distributed/elastic/multiprocessing/errors/error_handler.py``)::

    {"message": {"message": "ValueError: boom",
                 "extraInfo": {"py_callstack": "Traceback (most recent call last): ...",
                               "timestamp": "1764572400"}}}

An older or hand-written file may hold ``"message"`` as a plain string (torch's ``ProcessFailure``
takes both).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any, Optional

MAX_BYTES = 256 * 1024
"""Error files larger than this are not read (the report carries the stderr tail instead)."""
TRACEBACK_LINES = 12
"""Last lines of the recorded traceback kept for the report."""
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)')


@dataclass(frozen=True)
class RecordedError:
    """The exception a rank recorded.

    Attributes:
        message: ``Type: message`` as ``@record`` wrote it.
        file: the file of the innermost frame of its traceback, or ``""``.
        line: that frame's line number, or 0.
        traceback: the traceback's last lines, oldest first.
    """

    message: str
    file: str = ""
    line: int = 0
    traceback: tuple[str, ...] = ()

    def describe(self) -> str:
        """``ValueError: boom (raised at /job/train.py, line 7)``."""
        where = f" (raised at {self.file}, line {self.line})" if self.file else ""
        return self.message + where


def parse(data: Any) -> Optional[RecordedError]:
    """The recorded error in an error file's decoded JSON, or ``None`` if it holds none."""
    if not isinstance(data, dict):
        return None
    message = data.get("message")
    if isinstance(message, str):
        return RecordedError(message) if message else None
    if not isinstance(message, dict) or not isinstance(message.get("message"), str):
        return None
    extra = message.get("extraInfo")
    stack = extra.get("py_callstack", "") if isinstance(extra, dict) else ""
    lines = [line for line in str(stack).splitlines() if line.strip()]
    frames = [m for m in map(_FRAME.match, lines) if m]
    innermost = frames[-1] if frames else None
    return RecordedError(
        message=message["message"],
        file=innermost["file"] if innermost else "",
        line=int(innermost["line"]) if innermost else 0,
        traceback=tuple(lines[-TRACEBACK_LINES:]),
    )


def read(path: str) -> Optional[RecordedError]:
    """The error recorded at ``path``; ``None`` when there is no file, it is too large, or it is not
    an error file (a rank that crashed mid-write leaves a partial one: the stderr tail then serves)."""
    try:
        if os.path.getsize(path) > MAX_BYTES:
            return None
        with open(path, encoding="utf-8", errors="replace") as f:
            return parse(json.load(f))
    except (OSError, ValueError):
        return None
