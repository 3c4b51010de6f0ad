"""Stands in for a framework daemon (put before its command with TRAINPLANE_DAEMON_PREFIX).

Records the command it was given (``sys.argv[1:]``, the daemon's real command line) in
``$STANDIN_DIR/<address>.json``, keyed by the address it was told to serve on (the last argument);
then exits with ``$STANDIN_EXIT`` if that address is on host ``$STANDIN_FAIL_AT``, else blocks until killed.
"""

from __future__ import annotations

import json
import os
import signal
import sys

address = sys.argv[-1]
name = address.replace("tcp://", "").replace(":", "_").replace("[", "").replace("]", "")
with open(os.path.join(os.environ["STANDIN_DIR"], f"{name}.json"), "w") as f:
    json.dump({"argv": sys.argv[1:], "pid": os.getpid()}, f)
if os.environ.get("STANDIN_FAIL_AT") and address.startswith(f"tcp://{os.environ['STANDIN_FAIL_AT']}:"):
    sys.exit(int(os.environ["STANDIN_EXIT"]))
while True:
    signal.pause()
