"""KubernetesCompute's port-forward relay: what it adds to a no-op call, against the same call made directly.

::

    PYTHONPATH=. python bench/relay.py     # 300 calls per path, interleaved (about 10 s)
    PYTHONPATH=. python bench/relay.py --quick     # 20 calls per path, the same last line

A 2-node local service job; one kept-alive ``JobClient`` per path, calls interleaved one by one so
that every path sees the same background load:

* ``direct``: to the coordinator's own address (the baseline);
* ``relay``: through :class:`runtime.workflow.portforward.Relay` with a plain TCP connector;
* ``portforward``: through the relay and the ``kubernetes`` client's port-forward
  (``pod_connector``) to the stand-in API server of the tests (``testbed/fake_apiserver.py``),
  which forwards to the coordinator: the client side of a real port-forward, without the real API
  server and kubelet hops.

The last line is ``relay direct_p50_ms=... relay_p50_ms=... portforward_p50_ms=... relay_ratio=...
portforward_ratio=...`` (ratios against ``direct``).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import tempfile
import time
from pathlib import Path

from kubernetes import config

from runtime.client import JobClient
from runtime.local.jobs import LocalJobSpec
from runtime.workflow.portforward import Relay, pod_connector
from testbed.fake_apiserver import FakeApiServer
from testbed.jobs import serving

CALL = "testbed.service_fns:rank"


def main() -> None:
    """Run the comparison and print one line per path and the summary line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300, help="timed calls per path (default 300)")
    parser.add_argument("--quick", action="store_true", help="20 calls per path (a check that it runs)")
    args = parser.parse_args()
    if args.quick:
        args.calls = 20
    spec = LocalJobSpec(workers=2, num_proc=1, mode="service", master_port=0, grace_period=1.0)
    with serving(spec, ready_timeout=120) as job, tempfile.TemporaryDirectory() as tmp:
        coordinator = (job.plan.addresses[0], job.plan.ports[0])
        api = FakeApiServer(lambda _namespace, _pod, _port: coordinator)
        api_client = config.new_client_from_config(config_file=str(api.kubeconfig(Path(tmp) / "kubeconfig")))
        relay = Relay(lambda: socket.create_connection(coordinator))
        forward = Relay(pod_connector(api_client, "default", "bench-0", 32300))
        clients = {"direct": JobClient(job.url, job.token), "relay": JobClient(relay.url, job.token),
                   "portforward": JobClient(forward.url, job.token)}
        times: dict[str, list[float]] = {name: [] for name in clients}
        load = os.getloadavg()[0]
        try:
            for client in clients.values():
                for _ in range(10):
                    client.call(CALL, timeout=30)
            for _ in range(args.calls):
                for name, client in clients.items():
                    started = time.perf_counter()
                    results = client.call(CALL, timeout=30)
                    times[name].append(time.perf_counter() - started)
                    if results != [0, 1]:
                        raise SystemExit(f"{name}: the call answered {results}, not the ranks [0, 1]")
        finally:
            for client in clients.values():
                client.close()
            relay.close()
            forward.close()
            api.close()
    p50 = {name: statistics.median(values) * 1000 for name, values in times.items()}
    for name, values in times.items():
        p99 = sorted(values)[int(0.99 * (len(values) - 1))] * 1000
        print(f"{name}: p50 {p50[name]:.2f} ms, p99 {p99:.2f} ms over {len(values)} calls")
    print(f"load average {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")
    print(f"relay direct_p50_ms={p50['direct']:.2f} relay_p50_ms={p50['relay']:.2f} "
          f"portforward_p50_ms={p50['portforward']:.2f} relay_ratio={p50['relay'] / p50['direct']:.2f} "
          f"portforward_ratio={p50['portforward'] / p50['direct']:.2f}")


if __name__ == "__main__":
    main()
