"""A user process for membership benchmarks and tests: records every membership change it is told.

Usage: ``recorder.py OUT_DIR STOP_FILE [catch|poll]``. Writes ``OUT_DIR/node-<NODE_RANK>-pid-<pid>.json``
(a JSON list of changes: wall time, how it learnt, generation, removed/added/current addresses,
its new RANK/WORLD_SIZE/MASTER_ADDR) and exits 0 once STOP_FILE exists. If ``CRASH_RANK`` equals
its RANK in generation 1, it writes ``OUT_DIR/crash-time`` after ``CRASH_AFTER`` seconds (default
1) and exits 5: a user-process crash with a known time.
"""

import json
import os
import signal
import sys
import time

import runtime

out, stop = sys.argv[1], sys.argv[2]
mode = sys.argv[3] if len(sys.argv) > 3 else "catch"
events = []
path = os.path.join(out, f"node-{os.environ['NODE_RANK']}-pid-{os.getpid()}.json")


def record(changes: list[tuple[runtime.WorkerMembershipChanged, str]]) -> None:
    """Move ``changes`` (each with how it was learnt) into this process's file. The delivery signal is
    blocked meanwhile, so a second change cannot be raised half-way through; one that came meanwhile
    is raised when it is unblocked, in the caller's ``try``."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {runtime.membership.DELIVERY_SIGNAL})
    try:
        for change, how in changes:
            events.append({"t": time.time(), "how": how, "generation": change.generation,
                           "removed": change.removed_ips, "added": change.added_ips, "current": change.current_ips,
                           "rank": os.environ["RANK"], "world_size": os.environ["WORLD_SIZE"],
                           "master": os.environ["MASTER_ADDR"]})
        changes.clear()
        with open(path, "w") as f:
            json.dump(events, f)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {runtime.membership.DELIVERY_SIGNAL})


with open(path, "w") as f:
    json.dump(events, f)
if os.environ["RANK"] == os.environ.get("CRASH_RANK") and os.environ["TRAINPLANE_GENERATION"] == "1":
    time.sleep(float(os.environ.get("CRASH_AFTER", "1")))
    crashed = time.time()
    with open(os.path.join(out, f"crash-time.{os.getpid()}"), "w") as f:
        f.write(repr(crashed))
    os.replace(f.name, os.path.join(out, "crash-time"))  # whole or absent: a reader never sees it half-written
    sys.exit(5)
# A change is raised wherever the main thread is, so all the work sits inside the try, and the handler
# only keeps the change: a second change raised while the first is recorded lands in the same try.
# Only the loop's jump and the handler's append stay outside, a few bytecodes.
pending: list[tuple[runtime.WorkerMembershipChanged, str]] = []
while True:
    try:
        if pending:
            record(pending)
        if os.path.exists(stop):
            break
        time.sleep(0.02)
        if mode == "poll":
            change = runtime.membership.poll()
            if change is not None:
                pending.append((change, "poll"))
    except runtime.WorkerMembershipChanged as change:
        pending.append((change, "raised"))
