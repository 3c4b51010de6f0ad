"""A node that joins a running elastic torch job starts its processes cold (the interpreter, ``import torch``, the
user's set-up) while the survivors, warm, re-initialise at once: the new world's ``env://`` rendezvous must wait
for the late ranks, not fail at the survivors' ``init_process_group`` timeout.

This is what an Indexed Job's replaced pod does on Kubernetes (issue 22: on the real node, a deleted pod's
replacement joined, and the survivors' rank 0 gave up with torch's ``Timed out after 21 seconds waiting for
clients. 2/4 clients joined``, the others with ``wait timeout ... keys: /default_pg/0//cpu//0/0``; the job then
failed with 121). Here the joiner's lateness is made longer than the survivors' timeout on purpose.

torch 2.13.0's ``env://`` handler (``torch/distributed/rendezvous.py``, ``_create_c10d_store``) makes rank 0's
``TCPStore`` wait for every client within the ``timeout`` given to ``init_process_group``; the clients connect
within it too.
"""

from __future__ import annotations

import json
import signal
import textwrap
from pathlib import Path

import pytest

from tests.conftest import AgentCluster, wait_until
from tests.runtime.agent.execution.test_torchgroup import run

pytestmark = pytest.mark.process

TIMEOUT = 3.0
"""The job's ``init_process_group`` timeout (s): shorter than the joiner's lateness."""
LATE = 9.0
"""Seconds a process of the joining node sleeps before its ``init_process_group`` (its cold start)."""

JOB = textwrap.dedent(f"""
    import datetime, json, os, sys, time
    import torch
    import torch.distributed as dist
    import runtime

    out, stop = sys.argv[1], sys.argv[2]
    if int(os.environ["TRAINPLANE_GENERATION"]) > 1:
        time.sleep({LATE})  # started for a later world: a cold start, slower than the others' timeout
    while True:
        try:
            if dist.is_initialized():
                dist.destroy_process_group()
            dist.init_process_group("gloo", timeout=datetime.timedelta(seconds={TIMEOUT}))
            while True:
                flag = torch.tensor([1.0 if os.path.exists(stop) else 0.0])
                dist.all_reduce(flag, op=dist.ReduceOp.MAX)
                with open(os.path.join(out, f"pid-{{os.getpid()}}"), "a") as f:
                    f.write(json.dumps([os.environ["TRAINPLANE_GENERATION"], dist.get_world_size()]) + "\\n")
                if flag.item():
                    sys.exit(0)
                time.sleep(0.1)
        except runtime.WorkerMembershipChanged:
            continue
        except RuntimeError:
            if runtime.membership.wait(15) is None:
                raise
""")


def sizes(out: Path) -> dict[str, list[int]]:
    """Each process (by pid file) -> the world size of every step it ran, in order."""
    return {p.name: [json.loads(line)[1] for line in p.read_text().splitlines()] for p in out.glob("pid-*")}


@pytest.mark.parametrize(("victim", "workers"), [(1, 2), (0, 3)])
def test_a_replaced_node_whose_ranks_start_later_than_the_survivors_timeout_rejoins_and_the_job_completes(
        tmp_path: Path, script, victim: int, workers: int) -> None:
    """Node 1 replaced: the survivor's rank 0 hosts the new world's store and waits for the late clients. Node 0
    replaced (in a world of 3, which fails over: node 1 coordinates meanwhile): the late rank 0 hosts it, and the
    survivors' ranks wait for it to listen."""
    out, stop = tmp_path / "out", tmp_path / "stop"
    out.mkdir()
    job = AgentCluster(tmp_path, [str(script(JOB)), str(out), str(stop)], workers, TRAINPLANE_MIN_WORKERS="1",
                       TRAINPLANE_MAX_WORKERS=str(workers), TRAINPLANE_PEERS="127.0.0.1{index}",
                       TRAINPLANE_DISTRIBUTION="pytorch", TRAINPLANE_MAX_RESTARTS="0")
    survivors = [i for i in range(workers) if i != victim]
    logs = lambda: "".join(job.log(i) for i in range(workers))  # noqa: E731
    try:
        assert wait_until(lambda: sum(workers in s for s in sizes(out).values()) == workers, timeout=120), logs()
        job.agents[victim].send_signal(signal.SIGTERM)  # the pod deleted: its agent leaves cleanly
        assert job.agents[victim].wait(timeout=30) == 143
        assert wait_until(lambda: sum(s[-1] == workers - 1 for s in sizes(out).values()) == workers - 1,
                          timeout=60), logs()
        before = sizes(out)
        going_on = {name for name, s in before.items() if s[-1] == workers - 1}  # the survivors' processes
        (tmp_path / f"agent-{victim}.log").rename(tmp_path / f"agent-{victim}.first.log")
        job.add(victim)  # its replacement, under the same index

        def rejoined() -> bool:
            now = sizes(out)
            new = [s for name, s in now.items() if name not in before]
            return len(new) == 1 and workers in new[0] and all(now[n][-1] == workers for n in going_on)

        done = wait_until(lambda: any(job.agents[i].poll() is not None for i in survivors) or rejoined(), timeout=120)
        assert done and all(job.agents[i].poll() is None for i in survivors), logs()
        stop.touch()
        assert job.wait(timeout=60) == dict.fromkeys(range(workers), 0), logs()
    finally:
        job.close()


MEET = """
    import datetime, json, time
    import torch.distributed as dist
    from runtime.agent.execution import torchhooks
    torchhooks.install_on_import(destroy=False)
    start = time.monotonic()
    try:
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=0.5))
        error = None
    except dist.DistStoreError as exc:
        error = str(exc)
    print(json.dumps({"error": error, "waited": time.monotonic() - start}))
"""


@pytest.mark.parametrize(("rank", "says"), [
    ("0", "1 of the 2 ranks of its world reached the store at 127.0.0.1:"),
    ("1", "rank 1 could not reach the store of its world at 127.0.0.1:"),
])
def test_a_rank_waits_for_the_others_up_to_the_join_timeout_then_says_who_did_not_come(rank: str, says: str) -> None:
    """Rank 0 alone (its store up, nobody arriving) and rank 1 alone (no store to reach) give up after
    ``TRAINPLANE_JOIN_TIMEOUT`` (2 s), not after the 0.5 s given to ``init_process_group``, naming the generation
    and the setting."""
    seen = run(MEET, RANK=rank, WORLD_SIZE="2", TRAINPLANE_JOIN_TIMEOUT="2", TRAINPLANE_GENERATION="3")
    assert seen["error"] is not None and says in seen["error"], seen
    assert "(generation 3) within TRAINPLANE_JOIN_TIMEOUT=2 s" in seen["error"], seen
    assert seen["waited"] >= 2.0, seen
