"""Stands in for a framework daemon (put before its command with TRAINPLANE_DAEMON_PREFIX).

With ``$STANDIN_RAY_NEVER_JOINS`` set to a node's address, it runs the real Ray daemon (found beside
the interpreter) on every other node and blocks on that one, a Ray node that never joins. Otherwise it
records the command it was given (``sys.argv[1:]``, the daemon's real command line) in
``$STANDIN_DIR/<address>.json``, keyed by the address it was told to serve on (the last argument);
then exits with ``$STANDIN_EXIT`` if that address is on host ``$STANDIN_FAIL_AT``, else listens on
the address, as a Monarch worker does (unless it is on host ``$STANDIN_DEAF_AT``: a worker that never
comes up), and blocks until killed.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys

never_joins = os.environ.get("STANDIN_RAY_NEVER_JOINS")
if never_joins is not None:  # a Ray job: run the real daemon, except on that node, which never joins
    if f"--node-ip-address={never_joins}" not in sys.argv:
        os.execv(os.path.join(os.path.dirname(sys.executable), sys.argv[1]), sys.argv[1:])  # noqa: S606
    while True:
        signal.pause()
address = sys.argv[-1]
name = address.replace("tcp://", "").replace(":", "_").replace("[", "").replace("]", "")
with open(os.path.join(os.environ["STANDIN_DIR"], f"{name}.json"), "w") as f:
    json.dump({"argv": sys.argv[1:], "pid": os.getpid()}, f)
if os.environ.get("STANDIN_FAIL_AT") and address.startswith(f"tcp://{os.environ['STANDIN_FAIL_AT']}:"):
    sys.exit(int(os.environ["STANDIN_EXIT"]))
host, _, port = address.replace("tcp://", "").rpartition(":")
if not (os.environ.get("STANDIN_DEAF_AT") and host == os.environ["STANDIN_DEAF_AT"]):
    listener = socket.create_server((host.strip("[]"), int(port)),
                                    family=socket.AF_INET6 if ":" in host else socket.AF_INET)
while True:
    signal.pause()
