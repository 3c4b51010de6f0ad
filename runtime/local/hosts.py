"""torchrun's per-node command lines: the same ``python -m runtime launch --nnodes N --rdzv-endpoint
HOST:PORT ... SCRIPT`` started once on every host (by hand, ``srun``, ``pdsh``), each launcher
running its own host's agent, all of them one job. Standard library only.

The launcher that can bind ``HOST:PORT`` (the endpoint's host; on one machine, the first launcher)
serves the join there, as torchrun's c10d rendezvous hosts its store on the endpoint: every
launcher, its own included, asks for a node rank (``POST /join``, with the job's token)::

    {"key": "<launcher id>", "node_rank": null, "nodes": 2, "addr": "10.0.0.3", "port": 41233}
        200 -> {"node_id": 1, "coordinator": ["10.0.0.2", 40111], "master_port": 29500}

Node ranks come from ``--node-rank`` when given, else in join order (the endpoint's own launcher
first, so it is node 0, the coordinator, unless ranks are given); ``coordinator`` is node 0's agent
once node 0 has joined (``null`` before: ask again). The agents then form the world as they do in
pods: node 0's agent is the coordinator, the others register with it.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from runtime.agent import contract
from runtime.agent.errors import HttpError, ParseError, TransportError
from runtime.agent.spec.address import HOST_PORT_FIX, bind_family, split_host_port
from runtime.agent.spec.agent_settings import NodeIdentity, node_rank_in
from runtime.agent.spec.setting import tcp_port
from runtime.local import jobs, launch_plan, logdirs

if TYPE_CHECKING:
    from runtime.local.json_http import JsonServer, Request, Response

ROUTE_JOIN = "/join"
JOIN_INTERVAL = 0.2
"""Seconds between attempts to reach the endpoint (its launcher not up yet) or to learn node 0."""
MAX_JOIN_BODY = 64 * 1024
"""Body cap of the join service, bytes."""
MISSING_TOKEN = (f"--rdzv-endpoint: every host's launcher needs the job's token in {contract.TOKEN}, the same secret "
                 f"on every host (export {contract.TOKEN}=$(python3 -c 'import secrets; "
                 f"print(secrets.token_urlsafe(32))') before starting them, e.g. before srun)")
"""Why a per-node command line without the job's token is refused (at parse time, and by :func:`start`)."""


@dataclass(frozen=True)
class Joined:
    """This launcher's place in the job.

    Attributes:
        node_id: its node rank.
        coordinator: node 0's agent, ``(address, port)``.
        master_port: the job's rendezvous port (``MASTER_PORT`` base), the endpoint launcher's.
    """

    node_id: int
    coordinator: tuple[str, int]
    master_port: int


class JoinService:
    """Hands out node ranks at the rendezvous endpoint (module docstring).

    Args:
        token: the job's token; every join must carry it.
        job: the job id every launcher must name (``--rdzv-id``).
        nodes: the job's node count (``--nnodes``); a launcher saying otherwise is refused.
        master_port: the job's rendezvous port, told to every launcher.
    """

    def __init__(self, token: str, job: str, nodes: int, master_port: int) -> None:
        self._token, self._job, self._nodes, self._master_port = token, job, nodes, master_port
        self._lock = threading.Lock()
        self._members: dict[int, tuple[str, str, int]] = {}
        """Node id -> (launcher key, address, agent port)."""
        self._server: Optional[JsonServer] = None

    def bind(self, endpoint: tuple[str, int]) -> bool:
        """Bind the endpoint; whether this launcher is the one that serves it (``False``: it is not
        an address of this host, or another launcher here serves it already)."""
        from runtime.local.json_http import JsonServer  # http.server: imported by the launcher that serves

        try:
            self._server = JsonServer(endpoint, self._token, {("POST", ROUTE_JOIN): self._route},
                                      max_body=MAX_JOIN_BODY, job=self._job)
        except OSError:
            return False
        return True

    def start(self) -> None:
        """Serve joins (a daemon thread), once this launcher has joined itself."""
        if self._server is not None:
            self._server.start()

    def stop(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.stop()

    def join(self, key: str, node_rank: Optional[int], nodes: int, addr: str, port: int) -> dict[str, Any]:
        """Give launcher ``key`` its node rank (the same again when it asks again).

        Raises:
            HttpError: 409 naming the conflict (another node count, a node rank taken or out of range,
                the job full).
        """
        if nodes != self._nodes:
            raise HttpError(409, f"--nnodes={nodes} is invalid: the launcher at the rendezvous endpoint runs "
                                 f"{self._nodes} nodes; start every host's launcher with the same command line")
        with self._lock:
            mine = next((i for i, member in self._members.items() if member[0] == key), None)
            if mine is None:
                mine = self._assign(key, node_rank)
                self._members[mine] = (key, addr, port)
            coordinator = self._members.get(0)
        return {"node_id": mine, "coordinator": None if coordinator is None else list(coordinator[1:]),
                "master_port": self._master_port}

    def _assign(self, key: str, node_rank: Optional[int]) -> int:
        if node_rank is not None:
            found = node_rank_in(self._nodes)(node_rank)
            if found is not None:
                raise HttpError(409, f"--node-rank={node_rank} is invalid: {found[0]}; {found[1]}")
            if node_rank in self._members:
                raise HttpError(409, f"--node-rank={node_rank} is invalid: another host's launcher has node rank "
                                     f"{node_rank}; give each host its own")
            return node_rank
        free = [i for i in range(self._nodes) if i not in self._members]
        if not free:
            raise HttpError(409, f"the job's {self._nodes} nodes have all joined; this launcher ({key}) is one too "
                                 f"many: --nnodes counts the hosts")
        return free[0]

    def _route(self, request: Request) -> Response:
        from runtime.local.json_http import Response

        body = request.body
        node_rank, nodes, port = body.get("node_rank"), body.get("nodes"), body.get("port")
        if (not isinstance(body.get("key"), str) or not isinstance(body.get("addr"), str)
                or not isinstance(nodes, int) or not isinstance(port, int)
                or not (node_rank is None or isinstance(node_rank, int))):
            raise HttpError(400, "a join is {key: str, node_rank: int or null, nodes: int, addr: str, port: int}")
        return Response(200, self.join(body["key"], node_rank, nodes, body["addr"], port))


def join(endpoint: tuple[str, int], token: str, job: str, node_rank: Optional[int], nodes: int, addr: str,
         port: int, timeout: float, key: str, service: Optional[JoinService] = None) -> Joined:
    """Join the job at ``endpoint``: this launcher's node rank and node 0's agent, asking until
    both are known (the endpoint's launcher may start later; node 0 may join later).

    Args:
        endpoint: ``(host, port)`` of the rendezvous endpoint.
        token: the job's token.
        job: the job id (``--rdzv-id``).
        node_rank: ``--node-rank``, or ``None`` for one in join order.
        nodes: ``--nnodes``.
        addr: where this host's agent is reached.
        port: the agent's port.
        timeout: seconds to keep asking (the quorum timeout).
        key: this launcher's id (:func:`launcher_key`): asking again gets the same node rank.
        service: the join service when this launcher serves it (asked directly).

    Raises:
        RuntimeError: refused (the reason), or not joined within ``timeout`` (what was last seen).
    """
    from runtime.local.json_http import request_json  # http.client: only a multi-host launch needs it

    body = {"key": key, "node_rank": node_rank, "nodes": nodes, "addr": addr, "port": port}
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    while True:
        try:
            answer = (service.join(key, node_rank, nodes, addr, port) if service is not None else
                      request_json(endpoint[0], endpoint[1], "POST", ROUTE_JOIN, token, body, timeout=10.0, job=job))
        except HttpError as exc:
            raise RuntimeError(str(exc)) from None
        except TransportError as exc:
            if exc.status is not None and exc.status != 503:
                raise RuntimeError(f"the rendezvous endpoint {endpoint[0]}:{endpoint[1]} refused this launcher: "
                                   f"{exc}") from None
            answer, last = {}, str(exc)
        if answer.get("coordinator"):
            host, agent_port = answer["coordinator"]
            return Joined(int(answer["node_id"]), (str(host), int(agent_port)), int(answer["master_port"]))
        if answer:
            last = f"node rank {answer['node_id']}; node 0 has not joined"
        if time.monotonic() > deadline:
            raise RuntimeError(f"could not join the job at {endpoint[0]}:{endpoint[1]} within {timeout:g} s: {last}")
        time.sleep(JOIN_INTERVAL)


def launcher_key() -> str:
    """A launcher's id in the join: its host name and a random part."""
    return f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"


def local_address(endpoint: tuple[str, int]) -> str:
    """This host's address on the route to ``endpoint`` (where its peers reach it), as the kernel
    picks the source address for it; the endpoint's own host gets the endpoint's address."""
    family, host = bind_family(endpoint[0])
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect((host, endpoint[1]))
        return str(probe.getsockname()[0])


def free_port(addr: str) -> int:
    """A TCP port free on ``addr`` now (either family)."""
    family, host = bind_family(addr)
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def parse_endpoint(text: str, default_port: int = contract.DEFAULT_MASTER_PORT) -> tuple[str, int]:
    """``--rdzv-endpoint`` as torchrun takes it: ``HOST:PORT``, ``[v6]:PORT``, or ``HOST`` (its
    default port).

    Raises:
        ParseError: ``(problem, fix)``: text ``split_host_port`` cannot read (its problem, and how to
            write it: ``spec.address.HOST_PORT_FIX``, the agent's coordinator's fix too), or a port the
            spec's ``tcp_port`` check refuses, in its words.
    """
    try:
        host, port = split_host_port(text)
    except ValueError as exc:
        raise ParseError(str(exc), HOST_PORT_FIX) from None
    port = default_port if port is None else port
    found = tcp_port()(port)
    if found is not None:
        raise ParseError(f"its port {found[0]}", found[1])
    return host, port


@dataclass
class HostJob:
    """This host's part of a job started by per-node command lines.

    Attributes:
        job: the agent of this host, as a one-agent :class:`jobs.LocalJob` (supervise it).
        joined: this host's node rank, node 0's agent, the job's rendezvous port.
        address: where this host's agent is reached.
        service: the join service, when this launcher serves the endpoint (stop it at the end).
    """

    job: jobs.LocalJob
    joined: Joined
    address: str
    service: Optional[JoinService]


def start(spec: jobs.LocalJobSpec, endpoint: tuple[str, int], node_rank: Optional[int],
          local_addr: Optional[str]) -> HostJob:
    """Join the job at ``endpoint`` (serving it, when this host can bind it) and start this host's
    agent as the node rank it got; returns at once, as ``jobs.start`` does.

    Args:
        spec: the job (``spec.workers``: every host's node count; ``spec.job_name``: the job id every
            launcher names).
        endpoint: ``--rdzv-endpoint``.
        node_rank: ``--node-rank``, or ``None`` for one in join order.
        local_addr: ``--local-addr``, where this host is reached; ``None``: the address on the route
            to the endpoint.

    Raises:
        RuntimeError: the job's token is not in the environment, the join was refused or timed out,
            or this host's log directory is taken.
        OSError: the agent could not be started.
    """
    token = os.environ.get(contract.TOKEN, "")
    if not token:
        raise RuntimeError(MISSING_TOKEN)
    job = str(spec.job_name)
    addr = local_addr or local_address(endpoint)
    agent_port = free_port(addr)
    lp = launch_plan.plan(1, spec.master_port, spec.num_proc)
    service: Optional[JoinService] = JoinService(token, job, spec.workers, lp.master_port)
    if not service.bind(endpoint):  # type: ignore[union-attr]
        service = None
    key = launcher_key()
    try:
        if service is not None:  # this host first (node 0 in join order), then the others
            service.join(key, node_rank, spec.workers, addr, agent_port)
            service.start()
        joined = join(endpoint, token, job, node_rank, spec.workers, addr, agent_port, spec.quorum_timeout, key,
                      service)
    except (RuntimeError, HttpError) as exc:
        if service is not None:
            service.stop()
        raise RuntimeError(str(exc)) from None
    base = None if spec.log_dir else logdirs.default_base()
    log_dir = spec.log_dir or os.path.join(base or "", f"{job}-node-{joined.node_id}")
    os.makedirs(log_dir, exist_ok=True)
    hold = logdirs.hold(log_dir)
    if base is not None:
        logdirs.prune(base)
    identity = NodeIdentity(node_id=joined.node_id, coordinator=joined.coordinator[0],
                            coordinator_port=joined.coordinator[1], agent_port=agent_port, advertise_address=addr,
                            bind_address=addr)
    env = jobs.node_env(spec, identity, job, token, log_dir, joined.master_port)
    agent = subprocess.Popen(jobs.agent_command(), env=env, stdin=None if spec.forward_stdin and joined.node_id == 0
                             else subprocess.DEVNULL)
    plan = launch_plan.LaunchPlan((joined.coordinator[0],), (joined.coordinator[1],), joined.master_port,
                                  lp.reservation)
    return HostJob(jobs.LocalJob(job=job, token=token, plan=plan, log_dir=log_dir, agents=[agent],
                                 signals_to_handle=spec.signals_to_handle, log_hold=hold), joined, addr,
                   service)


def default_job(endpoint: tuple[str, int]) -> str:
    """The job id every launcher of one endpoint takes when ``--rdzv-id`` is not given: the same on
    every host, and not another endpoint's."""
    return f"rdzv-{endpoint[0].replace(':', '-').replace('.', '-')}-{endpoint[1]}"


USED = ("rdzv_endpoint", "node_rank", "local_addr")
"""The torchrun options a per-node command line uses (by the launcher's dest)."""


def endpoint_of(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> Optional[tuple[str, int]]:
    """The rendezvous endpoint of a per-node command line (``--rdzv-endpoint`` without
    ``--standalone``), ``None`` for a job this launcher runs whole; names the job after it when
    ``--rdzv-id`` is not given. Calls ``parser.error`` (exit 2) for what such a job cannot take."""
    if not ns.rdzv_endpoint or ns.standalone:
        return None
    typed = ns.spelled.get("rdzv_endpoint", "--rdzv-endpoint")
    try:
        endpoint = parse_endpoint(ns.rdzv_endpoint)
    except ParseError as exc:
        parser.error(f"{typed}: {exc.problem} (got {ns.rdzv_endpoint!r}); {exc.fix}")
    if ns.min_workers is not None or ns.max_workers is not None:
        parser.error(f"{typed}: a job started by per-node command lines has a fixed node count (--nnodes N); "
                     f"drop MIN:MAX and --min-workers/--max-workers")
    found = None if ns.node_rank is None else node_rank_in(ns.workers)(ns.node_rank)
    if found is not None:
        parser.error(f"{ns.spelled.get('node_rank', '--node-rank')}: {found[0]} (got {ns.node_rank}); {found[1]}")
    if ns.mode == "service":
        parser.error(f"{typed}: a service job is started whole by one launcher (python -m runtime launch --mode "
                     f"service --workers N) or as a DistributedJob, not by per-node command lines")
    if not os.environ.get(contract.TOKEN):
        parser.error(MISSING_TOKEN)
    if not ns.job_name:
        ns.job_name = default_job(endpoint)
    return endpoint


def run(parser: argparse.ArgumentParser, spec: jobs.LocalJobSpec, endpoint: tuple[str, int],
        node_rank: Optional[int], local_addr: Optional[str]) -> int:
    """Run this host's node of the job at ``endpoint`` to its end; the job's exit code (as the
    launcher's is for a job it runs whole)."""
    try:
        host = start(spec, endpoint, node_rank, local_addr)
    except RuntimeError as exc:
        parser.error(str(exc))
    serving = " (serving the rendezvous there)" if host.service is not None else ""
    print(f"[trainplane] job {host.job.job}: node {host.joined.node_id} of {spec.workers} on {host.address}, "
          f"{spec.num_proc} process(es), joined at {endpoint[0]}:{endpoint[1]}{serving}; logs in {host.job.log_dir}",
          file=sys.stderr, flush=True)
    try:
        outcome = host.job.supervise()
    finally:
        if host.service is not None:
            host.service.stop()
    if outcome.exit_code:
        print(outcome.line(), file=sys.stderr, flush=True)
    return outcome.exit_code
