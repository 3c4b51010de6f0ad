"""No-op call latency through service-mode fan-out, flat and tree, against a bare HTTP baseline.

Usage::

    python bench/fanout.py            # N = 8, 64, 256, 1024; ~100-200 calls per point
    python bench/fanout.py --quick    # the same points with fewer calls: under a minute
    python bench/fanout.py --quick --nodes 8,64    # what the tests run (tests/test_bench_quick.py)

Lightweight agents (``testbed.inprocess``: the real HTTP server, auth, planning, fan-out,
merging and status checks; the called function runs in the agent's process) are spread over several
OS processes on loopback: the coordinator alone in one, the other N-1 nodes split evenly over the
rest. Each point starts a fresh fleet, warms it up (connections are kept alive in production too),
and times ``builtins:int`` (returns 0) on every node from this process: ``flat`` sends from the
coordinator to every node; ``tree`` uses width 50 at every size (threshold 1). In the same run,
``bare`` times this process touching all N agents with concurrent plain HTTP ``GET /healthz`` over
kept-alive connections, from one thread: the least work any fan-out must do here. Calls are sent
with the same client as the bare requests, so the ratio measures fan-out, not client overhead.

The other nodes' work is their host processes' CPU time (each reports its own, to the microsecond), per node
and round of a call, of a bare round and of a bare-exec round: what each costs the nodes themselves. The
coordinator's own work is read from its process's CPU time (``/proc``), which the shared cores
do not inflate: per child (flat) and per relayed result (tree); this process's own CPU per bare request is the
client's. With the cost of one hop, these feed a small latency model for separate hosts (``bench/README.md``),
which sets the tree against a lower bound of the bare round there. Last line, for the largest
``--nodes`` (1,024 by default; the target is set there)::

    fanout nodes=1024 tree_p50_ms=... flat_p50_ms=... bare_p50_ms=... ratio_vs_bare=<tree/bare> coordinator_requests=...
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from runtime.agent import contract  # noqa: E402 - after the path set-up, for `python bench/fanout.py`
from runtime.agent.net.peer import Answer, Exchange  # noqa: E402
from runtime.agent.net.transport import HttpTransport  # noqa: E402
from runtime.agent.rendezvous.tree import plan_root, split  # noqa: E402
from runtime.agent.world import Node  # noqa: E402

NOOP = "builtins:int"
"""The called function: ``int()`` returns 0 and touches nothing."""
FLAT_THRESHOLD = 1 << 30
"""``tree_threshold`` that keeps every call flat."""
WIDTH = contract.DEFAULT_TREE_FANOUT
ASSUMED_RTT_MS = 0.2
"""Round trip between hosts in one data-centre network, added per hop by the model (not measured here)."""
TARGET_RATIO = 1.5


@dataclass(frozen=True)
class Point:
    """Latency of one configuration, milliseconds, and the coordinator's work per call."""

    nodes: int
    mode: str
    p50_ms: float
    p99_ms: float
    coordinator_requests: float = 0.0
    coordinator_cpu_ms: float = 0.0
    node_cpu_us: float = 0.0
    """CPU of the other nodes' host processes per node and round, microseconds (as each process reports it)."""
    client_cpu_us: float = 0.0
    """CPU of this process (the client sending the round) per node and round, microseconds."""


@dataclass(frozen=True)
class Measured:
    """One fleet's interleaved samples: the calls, the bare rounds and the bare exec rounds."""

    call: Point
    bare: Point
    bare_exec: Point


class Fleet:
    """N lightweight agents over several host processes, sharing one world.

    Args:
        nodes: agents.
        hosts: OS processes for the N-1 non-coordinator agents (the coordinator gets its own).
        threshold: ``tree_threshold`` of every agent.
    """

    def __init__(self, nodes: int, hosts: int, threshold: int) -> None:
        self.token = secrets.token_urlsafe(16)
        settings = {"job": "bench", "token": self.token, "workers": nodes, "tree_threshold": threshold,
                    "tree_fanout": WIDTH}
        groups = [(0, 1)] + [(run[0], len(run)) for run in split(range(1, nodes), hosts)]
        self.procs = [
            subprocess.Popen([sys.executable, __file__, "--host", json.dumps({**settings, "first": first,
                                                                              "count": count})],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            for first, count in groups
        ]
        self.ports: list[int] = []
        for proc in self.procs:
            self.ports += json.loads(self._line(proc))["ports"]
        world = {"job": "bench", "generation": 1, "restart_count": 0, "max_restarts": 0, "master_port": 1,
                 "nodes": [Node(i, "127.0.0.1", p, 1).to_json() for i, p in enumerate(self.ports)]}
        for proc in self.procs:
            proc.stdin.write(json.dumps(world) + "\n")  # type: ignore[union-attr]
            proc.stdin.flush()  # type: ignore[union-attr]
        for proc in self.procs:
            self._line(proc)
        self.transport = HttpTransport(self.token, job="bench")
        self.nodes = nodes

    @staticmethod
    def _line(proc: subprocess.Popen[str]) -> str:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        if not line:
            raise RuntimeError(f"bench host {proc.pid} exited with {proc.wait()}")
        return line

    def call(self, workers: Optional[Sequence[int]] = None) -> float:
        """One no-op call through the coordinator; seconds. Raises on any failure (never timed)."""
        body = json.dumps({"fn": NOOP, "timeout": 60, "workers": list(workers) if workers else None}).encode()
        started = time.perf_counter()
        answer = self._one(Exchange("127.0.0.1", self.ports[0], "POST", contract.ROUTE_CALL, body))
        elapsed = time.perf_counter() - started
        expected = sorted(workers) if workers else list(range(self.nodes))
        if answer.status != 200 or answer.body.get("ranks") != expected or len(answer.body["results"]) != len(expected):
            raise RuntimeError(f"call failed: {answer.status} {answer.error or answer.body.get('error')}")
        return elapsed

    def bare(self) -> float:
        """Every agent's ``GET /healthz`` at once from one thread; seconds. Raises on any failure."""
        answers: list[Answer] = []
        exchanges = [Exchange("127.0.0.1", p, "GET", contract.ROUTE_HEALTHZ) for p in self.ports]
        started = time.perf_counter()
        self.transport.batch(exchanges, time.monotonic() + 60).run(answers.append)
        elapsed = time.perf_counter() - started
        if len(answers) != self.nodes or any(a.status != 200 for a in answers):
            raise RuntimeError("bare request failed")
        return elapsed

    def bare_exec(self) -> float:
        """Every agent's one-node ``POST /exec`` of the no-op at once from one thread (no tree); seconds.

        Not a baseline the target is judged against: it shows what running the call on every node
        costs here without any fan-out structure, to separate the tree's overhead from the per-node work.
        """
        answers: list[Answer] = []
        call_id = secrets.token_hex(8)
        exchanges = [
            Exchange("127.0.0.1", p, "POST", contract.ROUTE_EXEC, json.dumps({
                "call_id": call_id, "generation": 1, "invocation": {"fn": NOOP}, "timeout": 60, "nodes": [i],
                "fanout": WIDTH}).encode())
            for i, p in enumerate(self.ports)
        ]
        started = time.perf_counter()
        self.transport.batch(exchanges, time.monotonic() + 60).run(answers.append)
        elapsed = time.perf_counter() - started
        if len(answers) != self.nodes or any(a.status != 200 for a in answers):
            raise RuntimeError("bare exec failed")
        return elapsed

    def coordinator_requests(self) -> int:
        """Requests the coordinator has sent so far (its ``/info`` counters)."""
        answer = self._one(Exchange("127.0.0.1", self.ports[0], "GET", contract.ROUTE_INFO))
        return int(answer.body["service"]["requests_sent"])

    def coordinator_cpu(self) -> float:
        """CPU seconds the coordinator's process has used (user + system), from ``/proc``."""
        return _cpu(self.procs[0].pid)

    def nodes_cpu(self) -> float:
        """CPU seconds the other nodes' host processes have used, as each reports (``time.process_time``)."""
        for proc in self.procs[1:]:
            proc.stdin.write("cpu\n")  # type: ignore[union-attr]
            proc.stdin.flush()  # type: ignore[union-attr]
        return sum(float(json.loads(self._line(proc))["cpu"]) for proc in self.procs[1:])

    def _one(self, exchange: Exchange) -> Answer:
        answers: list[Answer] = []
        self.transport.batch([exchange], time.monotonic() + 90).run(answers.append)
        return answers[0]

    def stop(self) -> None:
        """Close every host process's stdin (its signal to stop) and wait for it to exit."""
        for proc in self.procs:
            proc.stdin.close()  # type: ignore[union-attr]
        for proc in self.procs:
            proc.wait(timeout=30)
        self.transport.close()


def _cpu(pid: int) -> float:
    """CPU seconds process ``pid`` has used (user + system), from ``/proc``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of ``samples`` (seconds) in milliseconds."""
    ordered = sorted(samples)
    return 1000 * ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def measure(fleet: Fleet, mode: str, calls: int, warmup: int) -> Measured:
    """Time ``calls`` no-op calls, each followed by one bare and one bare-exec round on the same fleet.

    Interleaving puts all three under the same load, which on shared cores drifts from second to second.
    """
    for _ in range(warmup):
        fleet.call()
        fleet.bare()
        fleet.bare_exec()
    calls_s, bare_s, exec_s, cpu_s = [], [], [], 0.0
    nodes_s = {"call": 0.0, "bare": 0.0, "bare_exec": 0.0}
    client_s = dict(nodes_s)

    def timed(name: str, samples: list[float], run: Callable[[], float]) -> None:
        before = fleet.nodes_cpu()
        client = time.process_time()
        samples.append(run())
        client_s[name] += time.process_time() - client
        nodes_s[name] += fleet.nodes_cpu() - before

    sent = fleet.coordinator_requests()
    for _ in range(calls):
        cpu = fleet.coordinator_cpu()
        timed("call", calls_s, fleet.call)
        cpu_s += fleet.coordinator_cpu() - cpu
        timed("bare", bare_s, fleet.bare)
        timed("bare_exec", exec_s, fleet.bare_exec)
    requests = (fleet.coordinator_requests() - sent) / calls

    def point(name: str, samples: list[float]) -> Point:
        return Point(fleet.nodes, name, percentile(samples, 50), percentile(samples, 99),
                     node_cpu_us=per_node_us(nodes_s[name]), client_cpu_us=per_node_us(client_s[name]))

    def per_node_us(seconds: float) -> float:
        return 1e6 * seconds / calls / (fleet.nodes - 1)

    call = Point(fleet.nodes, mode, percentile(calls_s, 50), percentile(calls_s, 99), requests, 1000 * cpu_s / calls,
                 per_node_us(nodes_s["call"]))
    return Measured(call, point("bare", bare_s), point("bare_exec", exec_s))


@dataclass(frozen=True)
class Model:
    """Costs the model predicts from, measured in this run.

    Attributes:
        base_ms: a call that runs on the coordinator alone (client hop, local run, merge).
        hop_ms: one more hop (coordinator to one child and back), on loopback, idle machine.
        per_child_ms: the coordinator's CPU per child it sends to (flat, 1,024 nodes).
        per_result_ms: the coordinator's CPU per result relayed from a subtree (tree, 1,024 nodes).
        per_request_ms: this process's CPU per node of a bare round (1,024 nodes): the client's own work for one
            ``GET /healthz`` sent and its answer read.
    """

    base_ms: float
    hop_ms: float
    per_child_ms: float
    per_result_ms: float
    per_request_ms: float

    def predict(self, nodes: int, tree: bool, rtt_ms: float) -> float:
        """Latency of a no-op call to ``nodes`` nodes on separate hosts, milliseconds.

        The critical path goes through the largest subtree at every level; a parent's work per child
        and per relayed result is serial, its children work in parallel; each hop adds ``hop_ms``
        plus the network round trip.
        """
        plan = plan_root(range(nodes), 0, threshold=1 if tree else FLAT_THRESHOLD, width=WIDTH)
        total = self.base_ms
        level, carried = list(plan.subtrees), nodes - 1
        while level:
            total += self.hop_ms + rtt_ms + len(level) * self.per_child_ms + carried * self.per_result_ms
            biggest = max(level, key=len)
            level, carried = split(biggest[1:], WIDTH), len(biggest) - 1
        return total

    def predict_bare(self, nodes: int, rtt_ms: float) -> float:
        """A lower bound of the bare round on separate hosts, milliseconds: one round trip plus the client's
        serial work for ``nodes`` requests (the nodes answer in parallel; their own work is left out)."""
        return rtt_ms + nodes * self.per_request_ms


def run_model(fleet_small: Fleet, flat_top: Point, tree_top: Point, bare_top: Point, calls: int) -> Model:
    """Measure the base and hop costs on a two-node fleet; combine with the coordinator's and the client's CPU
    at the largest point (1,024 nodes by default)."""
    for _ in range(5):
        fleet_small.call([0])
        fleet_small.call([1])
    base = statistics.median(fleet_small.call([0]) for _ in range(calls)) * 1000
    one_hop = statistics.median(fleet_small.call([1]) for _ in range(calls)) * 1000
    per_child = flat_top.coordinator_cpu_ms / (flat_top.nodes - 1)
    children = min(WIDTH, tree_top.nodes - 1)
    per_result = max(0.0, (tree_top.coordinator_cpu_ms - children * per_child) / (tree_top.nodes - 1))
    return Model(base, max(0.0, one_hop - base), per_child, per_result, bare_top.client_cpu_us / 1000)


def host(config: dict) -> None:
    """A bench host process: serve ``count`` lightweight agents until stdin closes (exiting closes them); each
    line read asks for its CPU time, answered with one line."""
    from runtime.agent.world import World
    from testbed.inprocess import LightweightAgent
    from testbed.settings import agent_settings

    agents = []
    for node_id in range(config["first"], config["first"] + config["count"]):
        settings = agent_settings(job_name=config["job"], token=config["token"], node_id=node_id,
                                  workers=config["workers"], mode="service", tree_threshold=config["tree_threshold"],
                                  tree_fanout=config["tree_fanout"])
        agent = LightweightAgent(settings, say=lambda line: print(line, file=sys.stderr))
        agent.start()
        agents.append(agent)
    print(json.dumps({"ports": [a.port for a in agents]}), flush=True)
    world = World.from_json(json.loads(sys.stdin.readline()))
    for agent in agents:
        agent.join(world)
    print(json.dumps({"ready": True}), flush=True)
    for _ in sys.stdin:  # a line asks for this process's CPU time; the end of stdin stops it
        print(json.dumps({"cpu": time.process_time()}), flush=True)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the benchmark; print one line per point, the model, the verdicts and the summary line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer calls per point (under a minute)")
    p.add_argument("--nodes", default="8,64,256,1024",
                   help="comma-separated node counts, 2 or more each; the last line reports the largest")
    p.add_argument("--agents-per-host", type=int, default=64,
                   help="lightweight agents per OS process (the coordinator always has its own); default 64")
    p.add_argument("--rtt-ms", type=float, default=ASSUMED_RTT_MS, help="network round trip the model assumes")
    p.add_argument("--host", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.host:
        host(json.loads(args.host))
        return 0
    sizes = [int(n) for n in args.nodes.split(",")]
    if min(sizes) < 2:
        p.error(f"--nodes {args.nodes}: every count must be 2 or more (a coordinator and a node to call)")
    top = max(sizes)
    calls = {n: (5 if n >= 1024 else 8) if args.quick else (100 if n <= 64 else 50) for n in sizes}
    warmup = 2 if args.quick else 5
    load = os.getloadavg()[0]
    print(f"fanout setup cpus={os.cpu_count()} load_avg_1m={load:.1f} agents_per_host={args.agents_per_host} "
          f"width={WIDTH} quick={args.quick}", flush=True)
    points: dict[tuple[int, str], Measured] = {}
    for n in sizes:
        hosts = min(n - 1, max(2, -(-(n - 1) // args.agents_per_host)))
        for mode, threshold in (("flat", FLAT_THRESHOLD), ("tree", 1)):
            fleet = Fleet(n, hosts, threshold)
            try:
                m = points[n, mode] = measure(fleet, mode, calls[n], warmup)
            finally:
                fleet.stop()
            print(f"fanout nodes={n} mode={mode} p50_ms={m.call.p50_ms:.2f} p99_ms={m.call.p99_ms:.2f} "
                  f"bare_p50_ms={m.bare.p50_ms:.2f} bare_p99_ms={m.bare.p99_ms:.2f} "
                  f"bare_exec_p50_ms={m.bare_exec.p50_ms:.2f} ratio_vs_bare={m.call.p50_ms / m.bare.p50_ms:.2f} "
                  f"coordinator_requests={m.call.coordinator_requests:g} "
                  f"coordinator_cpu_ms={m.call.coordinator_cpu_ms:.1f} node_cpu_us={m.call.node_cpu_us:.0f} "
                  f"bare_node_cpu_us={m.bare.node_cpu_us:.0f} bare_exec_node_cpu_us={m.bare_exec.node_cpu_us:.0f} "
                  f"host_processes={hosts}+1 calls={calls[n]}",
                  flush=True)
    small = Fleet(2, 1, FLAT_THRESHOLD)
    try:
        model = run_model(small, points[top, "flat"].call, points[top, "tree"].call, points[top, "tree"].bare,
                          20 if args.quick else 200)
    finally:
        small.stop()
    print(f"model base_ms={model.base_ms:.3f} hop_ms={model.hop_ms:.3f} per_child_us={1000 * model.per_child_ms:.1f} "
          f"per_result_us={1000 * model.per_result_ms:.2f} per_request_us={1000 * model.per_request_ms:.1f} "
          f"rtt_ms={args.rtt_ms:g} (assumed)", flush=True)
    for n in (1000, 10_000):
        tree_ms, bare_ms = model.predict(n, True, args.rtt_ms), model.predict_bare(n, args.rtt_ms)
        print(f"model separate_hosts nodes={n} flat_ms={model.predict(n, False, args.rtt_ms):.1f} "
              f"tree_ms={tree_ms:.1f} bare_ms>={bare_ms:.1f} ratio_vs_bare<={tree_ms / bare_ms:.2f}", flush=True)
    tree, flat, bare = points[top, "tree"].call, points[top, "flat"].call, points[top, "tree"].bare
    ratio = tree.p50_ms / bare.p50_ms
    print(f"target ratio_vs_bare<={TARGET_RATIO:g}: {'met' if ratio <= TARGET_RATIO else 'MISSED'} ({ratio:.2f}); "
          f"coordinator_requests<={WIDTH}: {'met' if tree.coordinator_requests <= WIDTH else 'MISSED'} "
          f"({tree.coordinator_requests:g}); rank order: checked on every timed call; load average "
          f"{os.getloadavg()[0]:.1f} at the end", flush=True)
    print(f"fanout nodes={top} tree_p50_ms={tree.p50_ms:.2f} flat_p50_ms={flat.p50_ms:.2f} "
          f"bare_p50_ms={bare.p50_ms:.2f} ratio_vs_bare={ratio:.2f} coordinator_requests={tree.coordinator_requests:g}",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
