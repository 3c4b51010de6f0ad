"""Ranks other than 0 reach a late rank 0's store by polling its port in Python (``execution.storewait``), in real
processes with real torch and gloo: a group forms although rank 0 makes its store last; a store that never comes
fails with torch's ``DistNetworkError`` (as torch's own client fails) naming the rank, the address and what to check;
a poll that met itself leaves the port free for rank 0; and a batch job's ranks, as
the launcher starts them, carry the hook while a rank 0's own ``TCPStore(MASTER_PORT, is_master=True)`` (torch's
documented way to bring a store) still binds the port."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runtime.agent.execution import storewait
from runtime.local.launch_plan import free_port
from tests.conftest import ROOT, project_env

pytestmark = pytest.mark.process

RANK = """
    import datetime, json, os, socket, sys, time
    from runtime.agent.execution import storewait

    storewait.install()
    import torch, torch.distributed as dist

    refused = 0
    connect = socket.create_connection

    def counted(*args, **kwargs):
        global refused
        try:
            return connect(*args, **kwargs)
        except ConnectionRefusedError:
            refused += 1
            raise

    socket.create_connection = counted
    if os.environ["RANK"] == "0":
        time.sleep(float(sys.argv[1]))  # rank 0 makes its store last
    try:
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=float(sys.argv[2])))
    except dist.DistNetworkError as exc:
        print(json.dumps({"error": str(exc), "refused": refused}))
        raise SystemExit(0)
    x = torch.ones(1)
    dist.all_reduce(x)
    print(json.dumps({"sum": x.item(), "refused": refused}))
    dist.destroy_process_group()
"""


def run_ranks(ranks: list[int], late: float, timeout: float) -> dict[int, dict[str, object]]:
    port = str(free_port("127.0.0.1"))
    procs = {rank: subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(RANK), str(late), str(timeout)], cwd=ROOT, text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "WORLD_SIZE": "2", "RANK": str(rank),
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE) for rank in ranks}
    try:
        outputs = {rank: p.communicate(timeout=120) for rank, p in procs.items()}
    finally:
        for p in procs.values():
            p.kill()
    assert all(p.returncode == 0 for p in procs.values()), outputs
    return {rank: json.loads(out.strip().splitlines()[-1]) for rank, (out, _) in outputs.items()}


def test_rank_1_waits_in_python_for_a_late_rank_0s_store_and_the_group_forms() -> None:
    """Rank 0 sleeps 1 s before ``init_process_group``: rank 1's poll is refused until then (torch's own client
    never meets a refusal), and the all-reduce sums both ranks."""
    seen = run_ranks([0, 1], late=1.0, timeout=60)
    assert seen[0] == {"sum": 2.0, "refused": 0}
    assert seen[1]["sum"] == 2.0
    assert int(str(seen[1]["refused"])) > 0


def test_a_store_that_never_comes_fails_naming_the_rank_the_address_and_the_variables() -> None:
    seen = run_ranks([1], late=0, timeout=1)
    error = str(seen[1]["error"])
    assert error.startswith("rank 1 could not reach rank 0's store at 127.0.0.1:"), error
    assert "within 0:00:01: " in error and "Connection refused" in error, error
    assert "check that rank 0 runs and has reached init_process_group" in error and "MASTER_PORT" in error, error


def test_a_poll_that_met_itself_is_refused_and_leaves_the_port_free(monkeypatch: pytest.MonkeyPatch) -> None:
    """A local port nothing listens on can be connected to from itself (TCP's simultaneous open); the poll counts
    that as refused and resets it, so no TIME_WAIT keeps rank 0 from binding the port."""
    itself = socket.socket()
    itself.bind(("127.0.0.1", 0))
    port = itself.getsockname()[1]
    itself.connect(("127.0.0.1", port))
    monkeypatch.setattr(storewait.socket, "create_connection", lambda address, timeout: itself)
    with pytest.raises(ConnectionRefusedError, match="reached only itself"):
        storewait._connect(("127.0.0.1", port), 1.0)
    assert itself.fileno() == -1
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", port))  # EADDRINUSE while a TIME_WAIT held it
        listener.listen()


JOB = """
    import os, sys, torch.distributed as dist
    from torch.distributed import TCPStore

    hooked = sys.modules["torch.distributed.rendezvous"]._create_c10d_store
    assert getattr(hooked, "_trainplane", False), "no store wait on this rank"
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, rank == 0)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    dist.barrier()
    print(f"rank {rank} formed a group of {dist.get_world_size()}")
    dist.destroy_process_group()
"""


def test_a_launched_batch_jobs_ranks_carry_the_hook_and_rank_0_still_binds_master_port(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(JOB))
    done = subprocess.run([sys.executable, "-m", "runtime", "launch", "--workers", "2", "--num-proc", "1",
                           str(script)], cwd=ROOT, env=project_env(), capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert all(f"rank {r} formed a group of 2" in done.stdout for r in (0, 1)), done.stdout
