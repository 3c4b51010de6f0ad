"""A user process for membership benchmarks and tests: records every membership change it is told.

Usage: ``recorder.py OUT_DIR STOP_FILE [catch|poll]``. Writes ``OUT_DIR/node-<NODE_RANK>-pid-<pid>.json``
(a JSON list of changes: wall time, how it learnt, generation, removed/added/current addresses,
its new RANK/WORLD_SIZE/MASTER_ADDR) and exits 0 once STOP_FILE exists. If ``CRASH_RANK`` equals
its RANK in generation 1, it writes ``OUT_DIR/crash-time`` after ``CRASH_AFTER`` seconds (default
1) and exits 5: a user-process crash with a known time.
"""

import json
import os
import sys
import time

import runtime

out, stop = sys.argv[1], sys.argv[2]
mode = sys.argv[3] if len(sys.argv) > 3 else "catch"
events = []
path = os.path.join(out, f"node-{os.environ['NODE_RANK']}-pid-{os.getpid()}.json")


def record(change: runtime.WorkerMembershipChanged, how: str) -> None:
    """Append one change to this process's file."""
    events.append({"t": time.time(), "how": how, "generation": change.generation, "removed": change.removed_ips,
                   "added": change.added_ips, "current": change.current_ips, "rank": os.environ["RANK"],
                   "world_size": os.environ["WORLD_SIZE"], "master": os.environ["MASTER_ADDR"]})
    with open(path, "w") as f:
        json.dump(events, f)


with open(path, "w") as f:
    json.dump(events, f)
if os.environ["RANK"] == os.environ.get("CRASH_RANK") and os.environ["TRAINPLANE_GENERATION"] == "1":
    time.sleep(float(os.environ.get("CRASH_AFTER", "1")))
    with open(os.path.join(out, "crash-time"), "w") as f:
        f.write(repr(time.time()))
    sys.exit(5)
# The change is raised wherever the main thread is, so the stop check sits inside the try too: a
# change raised outside it ends the process. A few bytecodes (the loop's jump, a record() under
# way when a second change comes) stay outside; the tests make one change at a time.
while True:
    try:
        if os.path.exists(stop):
            break
        time.sleep(0.02)
        if mode == "poll":
            change = runtime.membership.poll()
            if change is not None:
                record(change, "poll")
    except runtime.WorkerMembershipChanged as change:
        record(change, "raised")
