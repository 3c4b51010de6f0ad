"""The running world: the frozen set of nodes of one generation.

A ``World`` is what the coordinator freezes after quorum and pushes to every agent. Everything an
agent needs to start its processes is derived from it by pure functions
(``runtime.agent.execution.environment``), so the same world always gives the same ranks. Standard
library only.
"""

from __future__ import annotations

import json
import signal
from dataclasses import asdict, dataclass, replace
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

from runtime.agent.spec import ports
from runtime.agent.spec.address import host_port
from runtime.agent.spec.job import default
from runtime.agent.spec.status import RUNNING, TERMINAL


class Node(NamedTuple):
    """One agent (pod) in a world. A named tuple, not a dataclass: a world of 1,024 nodes is built
    on every node at every generation, and a tuple is three times cheaper to make.

    Attributes:
        node_id: stable identity (launcher index, StatefulSet ordinal, completion index); never
            changes for the life of the node, unlike its rank.
        addr: the address other nodes reach it at (IP or host name).
        port: the agent's HTTP port (TCP).
        num_proc: user processes this node runs.
    """

    node_id: int
    addr: str
    port: int
    num_proc: int

    def to_json(self) -> list[Any]:
        """``[node_id, addr, port, num_proc]``: a list, not an object, as worlds of 1,000+ nodes are
        sent to every node (less than half the bytes, and parsed 2.5 times faster)."""
        return [self.node_id, self.addr, self.port, self.num_proc]

    @classmethod
    def from_json(cls, data: Any) -> Node:
        """Rebuild from :meth:`to_json` output.

        Raises:
            TypeError: ``data`` is not ``[int, str, int, int]``.
        """
        node_id, addr, port, num_proc = data
        if type(node_id) is not int or type(addr) is not str or type(port) is not int or type(num_proc) is not int:
            raise TypeError(f"a node is [node_id, addr, port, num_proc] (int, str, int, int), got {data!r}")
        return cls(node_id, addr, port, num_proc)


def ended_text(exit_code: int, signum: int = 0) -> str:
    """How a process ended, as torchrun's reports tell a signal (``-9 (SIGKILL)``) from an exit
    code: ``was killed by SIGKILL`` for ``signum`` 9, else ``exited with code N``."""
    if signum:
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        return f"was killed by {name}"
    return f"exited with code {exit_code}"


@dataclass(frozen=True)
class Failure:
    """The root cause of a failed generation: one process that exited non-zero.

    Attributes:
        rank: global rank of the process.
        node_id: stable id of its node.
        local_rank: index of the process on its node.
        exit_code: exit status; 128 + N when killed by signal N.
        stderr_tail: the last lines it wrote to stderr, oldest first.
        timestamp: wall-clock time of the exit on its node, seconds since the epoch.
        addr: its node's address.
        daemon: for a framework daemon rather than a rank (single-controller jobs), its name, e.g.
            ``"ray worker"``; ``rank`` and ``local_rank`` are then -1.
        error: the exception the rank recorded in its ``TORCHELASTIC_ERROR_FILE`` (torch's
            ``@record``), ``Type: message (raised at FILE, line N)``; ``""`` if it recorded none.
        error_traceback: the last lines of that exception's traceback, oldest first.
        signal: the signal that killed it (9 for SIGKILL, the OOM killer's), 0 when it exited.
    """

    rank: int
    node_id: int
    local_rank: int
    exit_code: int
    stderr_tail: tuple[str, ...] = ()
    timestamp: float = 0.0
    addr: str = ""
    daemon: str = ""
    error: str = ""
    error_traceback: tuple[str, ...] = ()
    signal: int = 0

    def describe(self) -> str:
        """One paragraph naming the rank (or daemon), the node, the exit code and either the
        exception it recorded (with its traceback) or, when it recorded none, its stderr tail."""
        if self.daemon:
            head = (f"the {self.daemon} daemon (node {self.node_id} at {self.addr}) "
                    f"{ended_text(self.exit_code, self.signal)} while the driver was running")
        else:
            head = (
                f"rank {self.rank} (node {self.node_id} at {self.addr}, local rank {self.local_rank}) "
                f"{ended_text(self.exit_code, self.signal)}"
            )
        if self.error:
            lines = ("; its recorded error (TORCHELASTIC_ERROR_FILE): " + self.error, *(
                f"    {line}" for line in self.error_traceback))
            return head + "\n".join(lines)
        if not self.stderr_tail:
            return head
        return head + "; last stderr lines:\n" + "\n".join(f"    {line}" for line in self.stderr_tail)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Failure:
        """Rebuild from :meth:`to_json` output. Raises KeyError/TypeError on a malformed mapping."""
        return cls(
            rank=int(data["rank"]),
            node_id=int(data["node_id"]),
            local_rank=int(data["local_rank"]),
            exit_code=int(data["exit_code"]),
            stderr_tail=tuple(str(s) for s in data.get("stderr_tail", ())),
            timestamp=float(data.get("timestamp", 0.0)),
            addr=str(data.get("addr", "")),
            daemon=str(data.get("daemon", "")),
            error=str(data.get("error", "")),
            error_traceback=tuple(str(s) for s in data.get("error_traceback", ())),
            signal=int(data.get("signal", 0)),
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        out = asdict(self)
        out["stderr_tail"] = list(self.stderr_tail)
        out["error_traceback"] = list(self.error_traceback)
        return out


@dataclass(frozen=True)
class World:
    """One generation of the job, as frozen by the coordinator.

    Attributes:
        job: job id (TORCHELASTIC_RUN_ID).
        generation: increases on every change (restart, membership change); starts at 1.
        restart_count: restarts so far (TORCHELASTIC_RESTART_COUNT).
        max_restarts: restarts allowed.
        nodes: the nodes in node-rank order; a node's rank is its position here.
        master_port: the job's base rendezvous port on node rank 0 (TCP); see :attr:`rendezvous_port`.
        distribution: one of ``runtime.agent.spec.job.DISTRIBUTIONS``.
        status: ``running`` or a terminal status (``succeeded``, ``failed``, ``stopped``).
        cause: for ``failed``, the root cause; for ``stopped``/rendezvous errors, ``None``.
        message: human-readable reason for a terminal status.
        exit_code: the exit code every agent should end with for a terminal status.
        coordinator: ``(node_id, addr, port)`` of the agent coordinating this world; it changes
            when the coordinator fails over.
        epoch: the coordinator's term: 1 under the first coordinator, one more at each takeover. A
            world is valid only with its epoch: worlds are ordered by :attr:`order`, so a coordinator
            that was fenced out (stalled, cut off) can never overrule its successor's worlds.
        job_elapsed: seconds the job had run (from its first coordinator's start) when this world was
            frozen: a coordinator that takes over counts the time limit on from there.
    """

    job: str
    generation: int
    restart_count: int
    max_restarts: int
    nodes: tuple[Node, ...]
    master_port: int
    distribution: str = default("distribution")
    status: str = RUNNING
    cause: Failure | None = None
    message: str = ""
    exit_code: int = 0
    coordinator: tuple[int, str, int] = (0, "", 0)
    epoch: int = 1
    job_elapsed: float = 0.0

    @property
    def order(self) -> tuple[int, int]:
        """``(epoch, generation)``: which of two worlds is newer. A later epoch wins over any
        generation of an earlier one."""
        return self.epoch, self.generation

    def replaces(self, previous: World) -> bool:
        """Whether this world is news to a node holding ``previous``: a later :attr:`order`, or the verdict of
        the same generation (``Member`` takes it rather than ignores it)."""
        return (self.order, self.status in TERMINAL) > (previous.order, previous.status in TERMINAL)

    def continues(self, previous: World, node_id: int) -> bool:
        """Whether node ``node_id``'s processes of ``previous`` carry on into this world (an elastic change they are
        told of), rather than stop: both running, the node in both, the same restart."""
        return (self.status == RUNNING and previous.status == RUNNING and self.has(node_id)
                and previous.has(node_id) and self.restart_count == previous.restart_count)

    @property
    def world_size(self) -> int:
        """Total processes: the sum of ``num_proc`` over nodes."""
        return sum(n.num_proc for n in self.nodes)

    @property
    def rendezvous_port(self) -> int:
        """This generation's MASTER_PORT (``spec.ports.rendezvous_port``)."""
        return ports.rendezvous_port(self.master_port, self.generation)

    @property
    def jax_coordinator_port(self) -> int:
        """This generation's JAX coordinator port (``spec.ports.jax_coordinator_port``)."""
        return ports.jax_coordinator_port(self.master_port, self.generation)

    @property
    def controller_port(self) -> int:
        """Single-controller jobs: the Ray head's port on node 0, and every node's Monarch worker port
        (``spec.ports.controller_port``)."""
        return ports.controller_port(self.master_port)

    def worker_port(self, node_rank: int) -> int:
        """A Monarch job: the port node ``node_rank``'s worker serves on (TCP). :attr:`controller_port`
        on every node with an address of its own; nodes sharing one (the local launcher's
        single-address fallback) count up from it, in node-rank order.

        Raises:
            IndexError: ``node_rank`` is outside the world.
        """
        addr = self.nodes[node_rank].addr
        return self.controller_port + sum(1 for n in self.nodes[:node_rank] if n.addr == addr)

    def worker_address(self, node_rank: int) -> str:
        """A Monarch job: ``tcp://host:port`` that node ``node_rank``'s worker serves on.

        Raises:
            IndexError: ``node_rank`` is outside the world.
        """
        return f"tcp://{host_port(self.nodes[node_rank].addr, self.worker_port(node_rank))}"

    @property
    def head_address(self) -> str:
        """A Ray job: ``host:port`` of the Ray head (its GCS) on node 0."""
        return host_port(self.master_addr, self.controller_port)

    @property
    def master_addr(self) -> str:
        """Address of node rank 0."""
        return self.nodes[0].addr

    def node_rank_of(self, node_id: int) -> int:
        """The node rank (position) of a stable node id. Raises KeyError if it is not in this world."""
        return self._positions[node_id]

    def has(self, node_id: int) -> bool:
        """Whether the node with stable id ``node_id`` is in this world."""
        return node_id in self._positions

    @property
    def _positions(self) -> dict[int, int]:
        # Memoised in the instance dict without functools.cached_property, whose lock (Python < 3.12)
        # is shared by every World in the process and serialised a thousand in-process agents.
        positions = self.__dict__.get("_positions_memo")
        if positions is None:
            positions = self.__dict__["_positions_memo"] = {n.node_id: i for i, n in enumerate(self.nodes)}
        return positions

    def first_rank(self, node_rank: int) -> int:
        """Global rank of local rank 0 on ``node_rank``: the dense prefix sum of ``num_proc``.

        Raises:
            IndexError: ``node_rank`` is outside the world.
        """
        return self._firsts[node_rank]

    def ranks_of(self, node_ranks: Sequence[int]) -> list[int]:
        """The global ranks of the processes of ``node_ranks``, in that order.

        Raises:
            IndexError: a node rank is outside the world.
        """
        firsts, out = self._firsts, list[int]()
        for n in node_ranks:
            out.extend(range(firsts[n], firsts[n + 1]))
        return out

    @property
    def _firsts(self) -> list[int]:
        """``first_rank`` of every node rank, then the world size; memoised as :attr:`_positions` is."""
        firsts = self.__dict__.get("_firsts_memo")
        if firsts is None:
            firsts, total = [], 0
            for n in self.nodes:
                firsts.append(total)
                total += n.num_proc
            firsts.append(total)
            self.__dict__["_firsts_memo"] = firsts
        return firsts

    def finished(self, status: str, message: str, exit_code: int, cause: Failure | None = None) -> World:
        """A copy of this world carrying a terminal status."""
        return replace(self, status=status, message=message, exit_code=exit_code, cause=cause)

    def verdict(self) -> dict[str, Any]:
        """The job's verdict as the local launcher reads it (``runtime.local.jobs``): ``status``,
        ``exit_code``, ``message`` and ``cause`` (the root cause, :meth:`Failure.to_json`, or ``None``)."""
        return {"status": self.status, "exit_code": self.exit_code, "message": self.message,
                "cause": self.cause.to_json() if self.cause else None}

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict; :meth:`from_json` reverses it. Computed once per world: do not mutate."""
        encoded = self.__dict__.get("_json_memo")
        if encoded is None:
            encoded = self.__dict__["_json_memo"] = {
                "job": self.job,
                "generation": self.generation,
                "restart_count": self.restart_count,
                "max_restarts": self.max_restarts,
                "nodes": [n.to_json() for n in self.nodes],
                "master_port": self.master_port,
                "distribution": self.distribution,
                "status": self.status,
                "cause": self.cause.to_json() if self.cause else None,
                "message": self.message,
                "exit_code": self.exit_code,
                "coordinator": list(self.coordinator),
                "epoch": self.epoch,
                "job_elapsed": self.job_elapsed,
            }
        return encoded

    def encoded(self) -> bytes:
        """:meth:`to_json` as JSON bytes, encoded once per world: a world of 1,024 nodes is about
        40 KB, which every node that beats before its push arrives is answered with."""
        data = self.__dict__.get("_bytes_memo")
        if data is None:
            data = self.__dict__["_bytes_memo"] = json.dumps(self.to_json()).encode()
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> World:
        """Rebuild a world. Raises KeyError, TypeError or ValueError on a malformed mapping."""
        nodes = tuple(Node.from_json(n) for n in data["nodes"])
        if not nodes:
            raise ValueError("a world needs at least one node")
        status = str(data.get("status", RUNNING))
        if status not in (RUNNING, *TERMINAL):
            raise ValueError(f"unknown world status {status!r}")
        cause = data.get("cause")
        return cls(
            job=str(data["job"]),
            generation=int(data["generation"]),
            restart_count=int(data["restart_count"]),
            max_restarts=int(data["max_restarts"]),
            nodes=nodes,
            master_port=int(data["master_port"]),
            distribution=str(data.get("distribution", default("distribution"))),
            status=status,
            cause=Failure.from_json(cause) if cause else None,
            message=str(data.get("message", "")),
            exit_code=int(data.get("exit_code", 0)),
            coordinator=_coordinator(data.get("coordinator") or (0, "", 0)),
            epoch=int(data.get("epoch", 1)),
            job_elapsed=float(data.get("job_elapsed", 0.0)),
        )


def _coordinator(value: Sequence[Any]) -> tuple[int, str, int]:
    node_id, addr, port = value
    return int(node_id), str(addr), int(port)


def nodes_from(entries: Iterable[Node]) -> tuple[Node, ...]:
    """Nodes in node-rank order: ascending stable node id."""
    return tuple(sorted(entries, key=lambda n: n.node_id))
