"""An elastic job's failure budget: how many failures each node's processes may have. Pure logic.
Standard library only.

Each failure of a node's process (a rank, or the framework daemon, exiting non-zero) counts against
that node's ``max_restarts``, as torchrun's agent counts its own worker group's failures (torch 2.13.0
``torch/distributed/elastic/agent/server/api.py``, ``SimpleElasticAgent._invoke_run``: ``UNHEALTHY``
or ``FAILED`` decrements ``_remaining_restarts``, and the group fails once none remain, while a
membership change, ``num_nodes_waiting() > 0``, restarts the workers because "membership changes do
not count as retries"). The node's failure past its budget fails the job with it as the root cause.
A node that vanishes (SIGKILL, eviction: its agent is lost, no process failed) and a node that joins
count for nothing: the survivors are told of the change, not restarted.
"""

from __future__ import annotations


class FailureBudget:
    """Failed processes so far, per node id.

    Args:
        max_restarts: failures each node may have; the next one is past its budget.
    """

    def __init__(self, max_restarts: int) -> None:
        self.max_restarts = max_restarts
        self._failures: dict[int, int] = {}

    def spend(self, node_id: int) -> bool:
        """Count one failure of node ``node_id``'s processes; whether it was past the budget."""
        self._failures[node_id] = self.failures(node_id) + 1
        return self._failures[node_id] > self.max_restarts

    def failures(self, node_id: int) -> int:
        """Failures of node ``node_id``'s processes counted so far."""
        return self._failures.get(node_id, 0)
