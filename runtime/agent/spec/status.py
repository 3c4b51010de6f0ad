"""A job's status, as its world carries it (``World.status``) and the agents' ``/info`` route reports it
to the client, the workflow API and the local launcher. Standard library only."""

from __future__ import annotations

RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
STOPPED = "stopped"
TERMINAL = (SUCCEEDED, FAILED, STOPPED)
"""The statuses a job ends with: a world carrying one is the job's last."""
