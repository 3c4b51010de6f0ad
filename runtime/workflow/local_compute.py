"""``LocalCompute``: a service-mode job of local agent processes, one loopback address per node."""

from __future__ import annotations

from typing import Mapping, Optional

from runtime import local
from runtime.agent.errors import RendezvousError
from runtime.agent.service.wire import JSON, PICKLE
from runtime.agent.spec.job import check, default
from runtime.workflow.compute import READY_TIMEOUT, Compute, DeployRequest, Endpoint


class LocalCompute(Compute):
    """Agents and processes on this machine (``runtime.local``), one loopback address per node.

    Args:
        workers: nodes.
        num_proc: processes per node.
        distribution: see :class:`~runtime.workflow.compute.Compute`.
        serialization: see :class:`~runtime.workflow.compute.Compute`.
        env: further environment variables for every agent and process.
        log_dir: directory for per-rank logs (default: ``<job>`` in this user's directory of
            ``runtime.logdirs``, which keeps the newest 20 jobs' directories).
        grace_period: seconds a cancelled call gets before its process is replaced; also the
            SIGTERM-to-SIGKILL grace at teardown.
        tree_threshold: calls to this many nodes or more travel a tree.
        tree_fanout: children per node in a tree.
        ready_timeout: seconds the job may take to start.
    """

    def __init__(self, workers: int = default("workers"), num_proc: int = default("num_proc"),
                 distribution: str = default("distribution"), serialization: str = JSON, *,
                 env: Optional[Mapping[str, str]] = None, log_dir: Optional[str] = None,
                 grace_period: float = default("grace_period"), tree_threshold: int = default("tree_threshold"),
                 tree_fanout: int = default("tree_fanout"), ready_timeout: float = READY_TIMEOUT) -> None:
        super().__init__(workers, num_proc, distribution, serialization)
        for name, value in (("grace_period", grace_period), ("tree_threshold", tree_threshold),
                            ("tree_fanout", tree_fanout)):
            check(name, value)
        self.env = dict(env or {})
        self.log_dir = log_dir
        self.grace_period = grace_period
        self.tree_threshold = tree_threshold
        self.tree_fanout = tree_fanout
        self.ready_timeout = ready_timeout
        self.job: Optional[local.LocalJob] = None

    def _start(self, request: DeployRequest) -> Endpoint:
        spec = local.LocalJobSpec(workers=self.workers, num_proc=self.num_proc, mode="service",
                                  distribution=self.distribution, master_port=0, log_dir=self.log_dir,
                                  grace_period=self.grace_period, tree_threshold=self.tree_threshold,
                                  tree_fanout=self.tree_fanout, allow_pickle=self.serialization == PICKLE,
                                  pythonpath=request.pythonpath, env=self.env)
        job = local.start(spec)
        try:
            job.wait_ready(self.ready_timeout)
        except RendezvousError:
            job.stop()
            raise
        self.job = job
        return Endpoint(job.url, job.token)

    def _stop(self) -> None:
        if self.job is not None:
            self.job.stop(timeout=self.grace_period + 10.0)
            self.job = None
