"""A rank whose ``init_process_group`` failed or was interrupted by a membership change joins the next world's
group (issue 22, a replacement joining an elastic job: the survivors' rank 1 got the change raised inside its
re-formation's rendezvous, and in the next world waited for ``/trainplane/1//default_pg/1//cpu//0/0`` while
every other rank wrote and waited under ``default_pg/0/``, until ``DistStoreError: wait timeout``; the job
failed with 121).

torch 2.13's ``init_process_group`` names the default group from ``_world.group_count``, incremented before
the rendezvous; only ``destroy_process_group`` of a formed group puts it back to 0. Two real processes, real
gloo: rank 0 starts in the second world (the replacement's cold rank), rank 1 leaves a first world that never
formed, forced without timing: the store does not exist (``failed``), or the delivery signal is sent from
inside the rendezvous, where the agent's would land (``interrupted``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from runtime.local.launch_plan import free_port
from tests.conftest import ROOT

pytestmark = pytest.mark.process

RANK = """
    import datetime, json, os, signal, socket, sys
    import torch, torch.distributed as dist
    from runtime.agent.errors import WorkerMembershipChanged
    from runtime.agent.execution import delivery, torchhooks

    torchhooks.install_on_import(destroy=False)
    first = None
    if os.environ["RANK"] == "1":
        second = dict(TRAINPLANE_GENERATION="2", MASTER_PORT=os.environ["NEXT_PORT"], TRAINPLANE_JOIN_TIMEOUT="120")
        connect = socket.create_connection
        if sys.argv[1] == "interrupted":  # the agent's signal while the rendezvous waits for the store
            delivery.install()
            delivery.arm()
            delivery.write(os.environ["TRAINPLANE_WORLD_FILE"], WorkerMembershipChanged([], [], [], [], 2),
                           {**os.environ, **second})

            def signalled(*args, **kwargs):
                os.kill(os.getpid(), delivery.DELIVERY_SIGNAL)
                return connect(*args, **kwargs)

            socket.create_connection = signalled
        try:
            dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=1))
        except (dist.DistStoreError, WorkerMembershipChanged) as exc:
            first = type(exc).__name__
        socket.create_connection = connect
        os.environ.update(second)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    x = torch.ones(1)
    dist.all_reduce(x)
    print(json.dumps({"first": first, "sum": x.item(), "generation": os.environ["TRAINPLANE_GENERATION"]}))
    dist.destroy_process_group()
"""


@pytest.mark.parametrize(("how", "raised"), [("failed", "DistStoreError"), ("interrupted", "WorkerMembershipChanged")])
def test_a_rank_whose_first_init_did_not_form_a_group_meets_the_next_worlds_ranks(tmp_path, how: str,
                                                                                    raised: str) -> None:
    """Rank 1's first world (generation 1, its rank 0 never there) fails at its join timeout (1 s) or is left on a
    change to generation 2; both ranks then form generation 2's group and all-reduce (the sum 2.0). Before the fix
    they waited under different group names until the 10 s timeout."""
    second = str(free_port("127.0.0.1"))
    base = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "WORLD_SIZE": "2", "LOCAL_RANK": "0",
            "MASTER_ADDR": "127.0.0.1", "TRAINPLANE_WORLD_FILE": str(tmp_path / "world.json")}
    ranks = {
        0: {**base, "RANK": "0", "TRAINPLANE_GENERATION": "2", "MASTER_PORT": second, "TRAINPLANE_JOIN_TIMEOUT": "120"},
        1: {**base, "RANK": "1", "TRAINPLANE_GENERATION": "1", "TRAINPLANE_JOIN_TIMEOUT": "1", "NEXT_PORT": second,
            "MASTER_PORT": str(free_port("127.0.0.1", [int(second)]))},
    }
    procs = {rank: subprocess.Popen([sys.executable, "-c", textwrap.dedent(RANK), how], env=env, cwd=ROOT,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank, env in ranks.items()}
    try:
        outputs = {rank: p.communicate(timeout=180) for rank, p in procs.items()}
    finally:
        for p in procs.values():
            p.kill()
    assert {rank: p.returncode for rank, p in procs.items()} == {0: 0, 1: 0}, outputs
    seen = {rank: json.loads(out.strip().splitlines()[-1]) for rank, (out, _) in outputs.items()}
    assert seen == {0: {"first": None, "sum": 2.0, "generation": "2"},
                    1: {"first": raised, "sum": 2.0, "generation": "2"}}, outputs
