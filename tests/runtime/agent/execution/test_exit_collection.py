"""A rank's leftover reference cycles, a DDP model among them, are freed before the interpreter finalizes.

Found in CI: ranks of ``examples/ddp_digits.py`` that had finished their work died with ``terminate called
without an active exception`` (SIGABRT, exit 134), now and then, on a loaded machine. A DDP model is a reference
cycle, so it outlives ``main()`` and CPython frees it in its last collection, which runs after the interpreter is
marked finalizing (``Python/pylifecycle.c``, ``Py_FinalizeEx``, CPython 3.11: ``_PyRuntimeState_SetFinalizing``
then ``_PyGC_CollectIfEnabled``); from then on a thread other than the main one that takes the GIL is ended with
``pthread_exit``, and a gloo worker thread dropping a Python-owned tensor as the process group is destroyed is
unwound through C++ that cannot be unwound (the same cause as torch's abandoned atexit fix, pytorch/pytorch PR
179291). The bootstrap collects once the user's code is done, while the interpreter is whole.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, project_env

pytestmark = pytest.mark.process

CYCLE = """
import sys
out = sys.argv[1]

class Node:
    def __del__(self):
        with open(out, "w") as f:
            f.write(str(sys.is_finalizing()))

def main():
    node = Node()
    node.self = node  # a cycle: only the collector frees it

main()
"""

DDP = """
import gc, os, sys, weakref
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
out = sys.argv[1]
gc.set_threshold(10**9)  # whether an automatic collection runs before exit depends on allocation counts: none here

def freed(_ref):
    with open(out, "w") as f:
        f.write(str(sys.is_finalizing()))

def main():
    dist.init_process_group("gloo")
    net = DistributedDataParallel(torch.nn.Linear(4, 2))
    net(torch.randn(3, 4)).sum().backward()
    main.ref = weakref.ref(net, freed)
    dist.destroy_process_group()

main()
"""


def finalizing_when_freed(tmp_path: Path, script: str, bootstrap: bool, **env: str) -> str:
    """Run ``script`` (as a rank under the bootstrap, or with plain ``python``) and return what it wrote when its
    cycle was freed: ``"False"`` before finalization, ``"True"`` during it."""
    path, out = tmp_path / "rank.py", tmp_path / f"freed-{bootstrap}"
    path.write_text(script)
    runner = ["-m", "runtime.agent.execution.bootstrap"] if bootstrap else []
    done = subprocess.run([sys.executable, *runner, str(path), str(out)], cwd=ROOT, env=project_env(**env),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return out.read_text()


def test_a_cycle_left_by_the_users_code_is_freed_before_finalization_not_during_it(tmp_path: Path):
    assert finalizing_when_freed(tmp_path, CYCLE, bootstrap=False) == "True", "plain python frees it while finalizing"
    assert finalizing_when_freed(tmp_path, CYCLE, bootstrap=True) == "False"


def test_a_ddp_model_and_its_gloo_process_group_are_freed_before_finalization(tmp_path: Path):
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "0", "RANK": "0", "WORLD_SIZE": "1"}
    plain = finalizing_when_freed(tmp_path, DDP, bootstrap=False, **env)
    assert plain == "True", "plain python frees it while finalizing"
    assert finalizing_when_freed(tmp_path, DDP, bootstrap=True, **env) == "False"
