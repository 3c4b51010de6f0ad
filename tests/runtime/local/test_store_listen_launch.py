"""A fixed-size torch batch job's rank that reaches ``MASTER_PORT`` before rank 0 has made its store is not
refused (torch's client would wait before trying again, ``execution.storelisten``): rank 1 connects while
rank 0 is held back, then the group forms and all-reduces. Fails on a launcher whose rank 0 does not listen
first: rank 1's connection is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import launch

pytestmark = pytest.mark.process

SCRIPT = """
import os, pathlib, socket, sys, time
import torch, torch.distributed as dist
flag = pathlib.Path(sys.argv[1])
assert "TRAINPLANE_STORE_LISTEN" not in os.environ, "the agent's request is not the user's"
if os.environ["RANK"] == "1":
    socket.create_connection((os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])), timeout=30).close()
    flag.write_text("connected")
else:
    while not flag.exists():  # rank 0 makes its store only once rank 1 has connected
        time.sleep(0.05)
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
assert t.item() == 2
dist.destroy_process_group()
print(f"rank {os.environ['RANK']} all-reduced", flush=True)
"""


def test_an_early_rank_is_queued_not_refused_and_the_group_forms(tmp_path: Path) -> None:
    script = tmp_path / "early.py"
    script.write_text(SCRIPT)
    done = launch("--workers", "1", "--num-proc", "2", "--master-port", "0", str(script), str(tmp_path / "flag"),
                  timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rank 0 all-reduced" in done.stdout and "rank 1 all-reduced" in done.stdout
