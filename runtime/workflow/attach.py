"""Wait until a URL reaches a running service-mode coordinator, and read the job's shape.

Used wherever the workflow API reaches a job it did not start on this machine: an
``ExistingCompute`` (a job someone else deployed) and a ``KubernetesCompute`` (its stack's job,
through a port-forward).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional

from runtime.agent.errors import ConfigError, RendezvousError, TransportError, Unauthorized
from runtime.agent.spec.job import default
from runtime.agent.spec.status import RUNNING, TERMINAL
from runtime.client import JobClient

POLL_INTERVAL = 0.5
"""Seconds between checks of a job that is not ready yet."""


@dataclass(frozen=True)
class JobShape:
    """A running job's size and distribution, as its coordinator reports them.

    Attributes:
        workers: nodes in the current world.
        num_proc: processes per node.
        distribution: the job's distribution.
        job: the job id.
    """

    workers: int
    num_proc: int
    distribution: str
    job: str


@dataclass(frozen=True)
class Expectation:
    """What a caller waits for beyond "running", and what to tell the user when it does not come.

    Attributes:
        accepts: whether a running job's shape is the one wanted (e.g. the size a stack update asked for).
        wanted: the wanted shape in words, for the timeout message (empty: any shape).
        ended_is_final: whether a job that ended fails at once (a job nobody restarts) or is waited for
            (pods a controller restarts).
        hint: what to check when the job is not ready in time.
        problem: extra diagnosis of an unreachable URL (e.g. the port-forward's last error), or ``None``.
        stop: asked while the URL is unreachable: why waiting longer is pointless (the job's objects
            are gone), which ends the wait at once, or ``None`` to keep waiting.
    """

    accepts: Callable[[JobShape], bool] = lambda _shape: True
    wanted: str = ""
    ended_is_final: bool = True
    hint: str = ("check the URL (for a stack's job, the port-forward to pod <job>-0 on the agent port) "
                 "and that the job's pods are running; raise ready_timeout if it is still starting")
    problem: Callable[[], Optional[str]] = lambda: None
    stop: Callable[[], Optional[str]] = lambda: None


def wait_until_serving(url: str, token: str, serialization: str, ready_timeout: float,
                       expect: Expectation = Expectation(), clock: Callable[[], float] = time.monotonic,
                       sleep: Callable[[float], None] = time.sleep) -> JobShape:
    """Poll ``url`` until it is the coordinator of a running service-mode world that ``expect`` accepts.

    Args:
        url: the coordinator's base URL.
        token: the job's bearer token.
        serialization: the calls' serialization (``json`` or ``pickle``).
        ready_timeout: seconds to keep trying, >= 0.
        expect: the shape wanted and the hints for failures.
        clock: monotonic clock, seconds.
        sleep: waits between looks, seconds.

    Returns:
        The job's shape.

    Raises:
        Unauthorized: the token is wrong (at once, no retry).
        ConfigError: the URL reaches a batch-mode job, or an agent that is not the coordinator.
        RendezvousError: the job ended (when ``expect.ended_is_final``), or was not reachable, running
            and of the wanted shape within ``ready_timeout``, or ``expect.stop`` said none will come;
            names the URL and the last problem.
    """
    deadline = clock() + ready_timeout
    with JobClient(url, token, serialization=serialization) as client:
        while True:
            try:
                problem, shape = _check(client, url, expect)
            except Unauthorized:
                raise
            except TransportError as exc:
                extra = expect.problem()
                problem, shape = f"not reachable: {exc}" + (f"; {extra}" if extra else ""), None
                pointless = expect.stop()
                if pointless is not None:
                    raise RendezvousError(f"no running service-mode job at {url} ({problem}), and none will come: "
                                          f"{pointless}") from None
            if shape is not None:
                return shape
            if clock() >= deadline:
                wanted = f" {expect.wanted}" if expect.wanted else ""
                raise RendezvousError(f"no running service-mode job{wanted} at {url} within {ready_timeout:g} s "
                                      f"({problem}): {expect.hint}")
            sleep(POLL_INTERVAL)


def _check(client: JobClient, url: str, expect: Expectation) -> tuple[str, Optional[JobShape]]:
    """One look at the job: (what is still wrong, None) or ("", its accepted shape)."""
    info = client.info()
    if info.mode != "service":
        raise ConfigError(f"{url} is a {info.mode}-mode job, which takes no calls: attach to a job deployed "
                          "with mode: service")
    if info.raw.get("coordinator") is False:
        raise ConfigError(f"{url} is node {info.node_id} of job {info.job}, not its coordinator: connect to "
                          "node 0 (pod <job>-0)")
    if info.status in TERMINAL and expect.ended_is_final:
        raise RendezvousError(f"the job at {url} has ended (status {info.status!r}): redeploy it (e.g. pulumi up) "
                              "before attaching")
    if info.status != RUNNING:
        return f"status {info.status!r}", None
    members = client.members()
    shape = JobShape(workers=sum(1 for m in members.raw.get("members", []) if m.get("node_rank") is not None),
                     num_proc=info.num_proc, distribution=str(info.raw.get("distribution", default("distribution"))),
                     job=info.job)
    if not expect.accepts(shape):
        return f"running with {shape.workers} nodes x {shape.num_proc} processes", None
    return "", shape
