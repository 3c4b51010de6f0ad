"""``LocalCompute``: a service-mode job of local agent processes, one loopback address per node.

The agents' own output (their lines and their copy of every rank's) goes to ``agents.log`` in the
job's log directory, not to the caller's terminal: what the ranks write during a call reaches the
caller as the call's output (``runtime.workflow.printer``), once.

The job is elastic (up to ``resize_limit`` nodes), so ``.to()`` with a ``LocalCompute`` of the same
shape at another size resizes it in place: agents are started (they join the running world) or
stopped (the world goes on without them), and the next call runs at the new world size in the same
processes; each process applies the new world before its next call (``WorkerMembershipChanged``
from ``runtime.membership.wait(0, since=...)``).
"""

from __future__ import annotations

import os
import uuid
from typing import Mapping, Optional

from runtime.agent.errors import RendezvousError
from runtime.agent.spec.cachedir import tag_cache_dir
from runtime.agent.spec.job import SINGLE_CONTROLLER, check, default
from runtime.agent.spec.wire import JSON, PICKLE
from runtime.local import jobs, logdirs
from runtime.workflow.attach import Expectation, wait_until_serving
from runtime.workflow.compute import READY_TIMEOUT, Compute, DeployRequest, Endpoint, resize_limit_of

AGENTS_LOG = "agents.log"
"""The file in the job's log directory that holds the agents' output."""
LOG_TAIL_LINES = 20
"""Lines of it a failed start quotes."""
RESIZE_LIMIT = 64
"""The most nodes a local job can be resized to, unless ``resize_limit`` says otherwise."""


class LocalCompute(Compute):
    """Agents and processes on this machine (``runtime.local.jobs``), one loopback address per node.

    Args:
        workers: nodes.
        num_proc: processes per node.
        distribution: see :class:`~runtime.workflow.compute.Compute`.
        serialization: see :class:`~runtime.workflow.compute.Compute`.
        env: further environment variables for every agent and process.
        log_dir: directory for per-rank logs and the agents' ``agents.log`` (default: ``<job>`` in this
            user's directory of ``runtime.local.logdirs``, which keeps the newest 20 jobs' directories).
        grace_period: seconds a cancelled call gets before its process is replaced; also the
            SIGTERM-to-SIGKILL grace at teardown.
        tree_threshold: calls to this many nodes or more travel a tree.
        tree_fanout: children per node in a tree.
        ready_timeout: seconds the job may take to start (or to reach a new size).
        resize_limit: the most nodes the job can be resized to in place (its elastic bound, the job
            spec's ``max_workers``); ``ray`` and ``monarch`` jobs cannot be resized.
    """

    def __init__(self, *, workers: int = default("workers"), num_proc: int = default("num_proc"),
                 distribution: str = default("distribution"), serialization: str = JSON,
                 env: Optional[Mapping[str, str]] = None, log_dir: Optional[str] = None,
                 grace_period: float = default("grace_period"), tree_threshold: int = default("tree_threshold"),
                 tree_fanout: int = default("tree_fanout"), ready_timeout: float = READY_TIMEOUT,
                 resize_limit: int = RESIZE_LIMIT) -> None:
        super().__init__(workers, num_proc, distribution, serialization)
        for name, value in (("grace_period", grace_period), ("tree_threshold", tree_threshold),
                            ("tree_fanout", tree_fanout)):
            check(name, value)
        self.resize_limit = resize_limit_of(resize_limit)
        self.env = dict(env or {})
        self.log_dir = log_dir
        self.grace_period = grace_period
        self.tree_threshold = tree_threshold
        self.tree_fanout = tree_fanout
        self.ready_timeout = ready_timeout
        self.job: Optional[jobs.LocalJob] = None
        self._spec: Optional[jobs.LocalJobSpec] = None
        self._log_path = ""
        self._adopted: Optional[tuple[jobs.LocalJob, jobs.LocalJobSpec, str]] = None

    def continues(self, previous: Compute) -> bool:
        """Whether ``previous`` is a running local job of this shape (processes per node, distribution,
        settings) that this compute resizes in place instead of replacing."""
        return (isinstance(previous, LocalCompute) and previous.job is not None and previous._spec is not None
                and previous.distribution not in SINGLE_CONTROLLER and self._shape() == previous._shape()
                and self.workers <= previous._spec.max_nodes)

    def adopt(self, previous: Compute) -> None:
        """Take over ``previous``'s job (see :meth:`continues`); the next deploy resizes it."""
        if isinstance(previous, LocalCompute) and previous.job is not None and previous._spec is not None:
            self._adopted = (previous.job, previous._spec, previous._log_path)
        super().adopt(previous)

    def release(self) -> None:
        """Let go of the job without stopping it (another compute resizes it)."""
        super().release()
        self.job = None

    def _shape(self) -> tuple[object, ...]:
        return (self.num_proc, self.distribution, self.serialization, self.env, self.log_dir, self.grace_period,
                self.tree_threshold, self.tree_fanout)

    def _start(self, request: DeployRequest) -> Endpoint:
        adopted, self._adopted = self._adopted, None
        if adopted is not None:
            return self._resize(*adopted)
        elastic = self.distribution not in SINGLE_CONTROLLER  # resizable in place (ray and monarch are not)
        job_name = f"local-{uuid.uuid4().hex[:8]}"
        job_dir = self.log_dir or os.path.join(logdirs.default_base(), job_name)
        os.makedirs(job_dir, exist_ok=True)
        tag_cache_dir(job_dir)  # a log directory inside the project is not synced as code
        spec = jobs.LocalJobSpec(workers=self.workers, num_proc=self.num_proc, mode="service",
                                  distribution=self.distribution, master_port=0, log_dir=self.log_dir,
                                  job_name=job_name,
                                  grace_period=self.grace_period, tree_threshold=self.tree_threshold,
                                  tree_fanout=self.tree_fanout, allow_pickle=self.serialization == PICKLE,
                                  env=self.env, min_workers=1 if elastic else None,
                                  max_workers=self._most() if elastic else None)
        log_path = os.path.join(job_dir, AGENTS_LOG)
        with open(log_path, "ab") as log:
            job = jobs.start(spec, stdout=log, stderr=log, new_session=True)
        try:
            job.wait_ready(self.ready_timeout)
        except RendezvousError as exc:
            job.stop()
            with open(log_path, errors="replace") as log:
                tail = "".join(log.readlines()[-LOG_TAIL_LINES:])
            raise RendezvousError(f"{exc}\nthe last lines of {log_path}:\n{tail}") from None
        self.job, self._spec, self._log_path = job, spec, log_path
        return Endpoint(job.url, job.token)

    def _most(self) -> int:
        """The most nodes the job can be resized to."""
        return max(self.resize_limit, self.workers)

    def _resize(self, job: jobs.LocalJob, spec: jobs.LocalJobSpec, log_path: str) -> Endpoint:
        """Grow or shrink ``job`` to :attr:`workers` nodes (``LocalJob.scale``) and wait until its world has them.

        Raises:
            RendezvousError: the world did not reach the new size within ``ready_timeout``.
        """
        self.job, self._spec, self._log_path = job, spec, log_path
        with open(log_path, "ab") as log:
            job.scale(spec, self.workers, log, self.grace_period + 10.0)
        wait_until_serving(job.url, job.token, self.serialization, self.ready_timeout, Expectation(
            accepts=lambda shape: shape.workers == self.workers, wanted=f"of {self.workers} nodes",
            hint=f"see {log_path}"))
        return Endpoint(job.url, job.token)

    def _stop(self) -> None:
        if self.job is not None:
            self.job.stop(timeout=self.grace_period + 10.0)
            self.job = None
