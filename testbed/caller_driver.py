"""A driver the caller-side tests and ``bench/cancel.py`` start, signal and kill: it calls
``service_fns.mark_then_wait`` on a job and, when that call is interrupted (Ctrl-C), says so and calls
``service_fns.whoami``.

    python -m testbed.caller_driver existing URL TOKEN PREFIX GATE
    python -m testbed.caller_driver portforward KUBECONFIG POD TOKEN PREFIX GATE
    python -m testbed.caller_driver local PREFIX GATE

``existing`` attaches to a running job (``ExistingCompute``); ``portforward`` reaches it as
``KubernetesCompute`` does, through a local relay and the ``kubernetes`` client's port-forward to pod
``POD`` (namespace ``default``) of the API server in ``KUBECONFIG``; ``local`` starts a
``LocalCompute(workers=2)``. Prints ``calling``, then ``interrupted`` and the second call's results as
JSON (one line) after a ``KeyboardInterrupt``.
"""

from __future__ import annotations

import contextlib
import json
import sys

from runtime.agent import contract
from runtime.workflow import ExistingCompute, LocalCompute, fn
from runtime.workflow.compute import Compute
from testbed import service_fns


def run(compute: Compute, prefix: str, gate: str) -> None:
    """The interrupted call, then the next one."""
    wait = fn(service_fns.mark_then_wait).to(compute)
    print("calling", flush=True)
    try:
        wait(prefix, gate)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    print(json.dumps(fn(service_fns.whoami).to(compute)()), flush=True)


def main(argv: list[str]) -> None:
    mode, rest = argv[0], argv[1:]
    with contextlib.ExitStack() as stack:
        if mode == "existing":
            url, token, prefix, gate = rest
            compute: Compute = ExistingCompute(url, token)
        elif mode == "portforward":
            from kubernetes import config

            from runtime.workflow.portforward import Relay, pod_connector

            kubeconfig, pod, token, prefix, gate = rest
            api = config.new_client_from_config(config_file=kubeconfig)
            relay = stack.enter_context(Relay(pod_connector(api, "default", pod, contract.AGENT_PORT)))
            compute = ExistingCompute(relay.url, token)
        else:
            prefix, gate = rest
            compute = stack.enter_context(LocalCompute(workers=2, num_proc=1, grace_period=1.0))
        run(compute, prefix, gate)


if __name__ == "__main__":
    main(sys.argv[1:])
