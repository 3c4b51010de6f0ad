"""A local service job for the length of a test fixture."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from runtime.local.jobs import LocalJob, LocalJobSpec, start


@contextlib.contextmanager
def serving(spec: LocalJobSpec, ready_timeout: float, stop_timeout: float = 30.0) -> Iterator[LocalJob]:
    """Start ``spec``, wait until its world runs (``ready_timeout`` seconds), stop it on the way out."""
    job = start(spec)
    try:
        job.wait_ready(ready_timeout)
        yield job
    finally:
        job.stop(timeout=stop_timeout)
