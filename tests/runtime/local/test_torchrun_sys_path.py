"""What a rank sees of its own launch under the real torchrun of the pinned torch (2.13.0) and under
the launcher, side by side: PYTHONPATH, ``sys.argv``, ``__file__`` and ``sys.path``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.local import launch_plan
from tests.conftest import ROOT

pytestmark = pytest.mark.process

SEEN = """
import json, os, sys
with open(os.path.join(sys.argv[1], "rank-" + os.environ["RANK"] + ".json"), "w") as f:
    json.dump({"env": dict(os.environ), "argv": sys.argv, "file": __file__, "path": sys.path}, f)
"""


@pytest.mark.parametrize("pythonpath", [None, "mine"])
def test_a_rank_sees_the_pythonpath_sys_path_and_script_path_torchrun_gives_it(tmp_path: Path, script,
                                                                                pythonpath: str | None):
    """No directory of the launcher's on PYTHONPATH (the repository, before installed packages):
    the user's PYTHONPATH as it was, or none; ``sys.argv[0]`` as typed (a relative path here) and
    ``__file__`` as torchrun gives them; ``sys.path`` torchrun's, with the repository appended
    after the installed packages only when it is not on it (so ``import runtime`` works)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OMP_NUM_THREADS")}
    if pythonpath:
        (tmp_path / pythonpath).mkdir()
        env["PYTHONPATH"] = str(tmp_path / pythonpath)
    typed = os.path.relpath(script(SEEN), ROOT)
    theirs_dir, ours_dir = tmp_path / "torchrun", tmp_path / "trainplane"
    theirs_dir.mkdir()
    ours_dir.mkdir()
    port = launch_plan.free_port("127.0.0.1")
    theirs_run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                                 "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", typed,
                                 str(theirs_dir)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert theirs_run.returncode == 0, theirs_run.stderr
    ours_run = subprocess.run([sys.executable, "-m", "runtime", "launch", "--nproc-per-node", "2", "--master-port",
                               "0", typed, str(ours_dir)], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=120)
    assert ours_run.returncode == 0, ours_run.stderr
    for rank in (0, 1):
        theirs, ours = (json.loads((d / f"rank-{rank}.json").read_text()) for d in (theirs_dir, ours_dir))
        assert ours["env"].get("PYTHONPATH") == theirs["env"].get("PYTHONPATH") == env.get("PYTHONPATH")
        assert (ours["argv"], theirs["argv"]) == ([typed, str(ours_dir)], [typed, str(theirs_dir)])
        assert ours["file"] == theirs["file"]
        assert ours["path"] == [*theirs["path"], str(ROOT)], "the repository only last, for runtime itself"
