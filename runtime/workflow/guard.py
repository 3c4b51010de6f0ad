"""Refuse to deploy from inside a job: a driver without ``if __name__ == "__main__":`` would nest jobs.

A job's processes import the module of every function they are called with. When that module is
the driver script and its driver code is not under the ``__main__`` guard, each import runs the
driver again, inside the job: it would start another job, whose processes import the driver, and so
on (``[rank 0] [rank 0] [rank 0] ...``), until a deadline or forever. Every process an agent starts
carries the variables of the environment contract that only agents set (``TRAINPLANE_WORLD_FILE``,
``TRAINPLANE_GENERATION``; the launcher and pods never set them on the agent itself), so the
process, and any child it starts, knows it runs inside a job.
"""

from __future__ import annotations

import os
from typing import Mapping, Optional

from runtime.agent import contract
from runtime.workflow.errors import NestedJobError

JOB_PROCESS_MARKERS = (contract.TRAINPLANE_WORLD_FILE, contract.TRAINPLANE_GENERATION)
"""Variables an agent sets on every process of its job, and nobody else sets."""


def job_process_marker(environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The first job-process variable set in ``environ`` (default ``os.environ``), or ``None`` outside a job."""
    env = os.environ if environ is None else environ
    return next((name for name in JOB_PROCESS_MARKERS if env.get(name)), None)


def refuse_inside_job(what: str, environ: Optional[Mapping[str, str]] = None) -> None:
    """Raise :class:`NestedJobError` when this process belongs to a job.

    Args:
        what: the compute being deployed, for the message (e.g. ``LocalCompute(workers=2, ...)``).
        environ: the environment to judge (default ``os.environ``).

    Raises:
        NestedJobError: a job-process variable is set; the message says to guard the driver.
    """
    marker = job_process_marker(environ)
    if marker is None:
        return
    env = os.environ if environ is None else environ
    where = f"rank {env[contract.RANK]} of job {env.get(contract.TORCHELASTIC_RUN_ID, '?')}" \
        if contract.RANK in env else "a job's process"
    raise NestedJobError(
        f".to({what}) was called inside {where} ({marker} is set): a job's processes import the module "
        "of the function they run, and this module deploys a job when imported. Put the driver code "
        "(everything that calls .to() and the remote functions) under `if __name__ == \"__main__\":`, "
        "or define the remote functions in a module of their own"
    )
