"""The launcher's console is line-true per rank, with real agents and processes: ``\\r`` redraws
keep their rank's prefix, unfinished lines of ranks on two nodes (two agents writing one terminal)
never merge, a rank killed by a real SIGKILL is reported as killed by it (not as ``exited with code
137``, which stays ``sys.exit(137)``'s text), and every rank torn down after it is listed with how
it ended, as torchrun's agents record the others' ``-15``."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.conftest import ROOT, launch, project_env, wait_until

pytestmark = pytest.mark.process

TURNS = """
import os, sys, time
rank, out = os.environ["RANK"], sys.argv[1]
def turn(name):
    while not os.path.exists(os.path.join(out, name)):
        time.sleep(0.02)
stream = sys.stdout if rank == "0" else sys.stderr  # tqdm draws on stderr; a terminal shows both
if rank == "0":
    stream.write("A-start"); stream.flush(); turn("go2")
    stream.write(" A-end\\n"); stream.flush()
else:
    turn("go1"); stream.write("\\rB 10%"); stream.flush(); stream.write("\\rB 20%"); stream.flush(); turn("go3")
    stream.write(" B-end\\n"); stream.flush()
"""


class Raw:
    """Everything a process writes to one pipe, read as it comes (unfinished lines included)."""

    def __init__(self, fd: int) -> None:
        self.data = b""
        self._fd = fd
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while chunk := os.read(self._fd, 65536):
            self.data += chunk

    def done(self) -> bytes:
        self._thread.join(timeout=10)
        return self.data


def test_redraws_keep_their_prefix_and_two_nodes_open_lines_never_merge(tmp_path: Path, script):
    """Rank 0 (node 0) leaves a line open; rank 1 (node 1) redraws a bar, `\\r` by `\\r`, while it
    is open; then each ends its line. The test orders the turns by what the console shows."""
    out = tmp_path / "turns"
    out.mkdir()
    path = script(TURNS)
    read, write = os.pipe()
    proc = subprocess.Popen([sys.executable, "-m", "runtime", "launch", "--nnodes", "2", "--master-port", "0",
                             str(path), str(out)], cwd=ROOT, env=project_env(), stdout=write, stderr=write)
    os.close(write)
    console = Raw(read)
    try:
        for shown, go in ((b"[rank 0] A-start", "go1"), (b"[rank 1] B 20%", "go2"), (b"A-end\n", "go3")):
            assert wait_until(lambda shown=shown: shown in console.data, timeout=60), console.data
            (out / go).touch()
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
    lines = [line for line in console.done().split(b"\n") if b"[rank" in line]
    assert lines == [b"[rank 0] A-start", b"\r[rank 1] B 10%\r[rank 1] B 20%", b"[rank 0]  A-end",
                     b"[rank 1]  B-end"]


def test_the_tee_file_keeps_the_redraws_as_written(tmp_path: Path, script):
    path = script("import sys\nfor i in range(3):\n    sys.stderr.write(f'\\r{i}/3'); sys.stderr.flush()\n"
                  "sys.stderr.write('\\n')\n")
    logs = tmp_path / "logs"
    result = subprocess.run([sys.executable, "-m", "runtime", "launch", "--master-port", "0", "--log-dir", str(logs),
                             "--tee", "3", str(path)], cwd=ROOT, env=project_env(), capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr
    (run,) = logs.iterdir()
    assert (run / "node-0" / "gen-1" / "0" / "stderr.log").read_bytes() == b"\r0/3\r1/3\r2/3\n"
    shown = next(line for line in result.stderr.split(b"\n") if b"0/3" in line)
    assert shown == b"\r[rank 0] 0/3\r[rank 0] 1/3\r[rank 0] 2/3"


KILLED = """
import os, signal, sys, time
rank = os.environ["RANK"]
if rank == "3":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # outlives the grace period: SIGKILL
open(os.path.join(sys.argv[1], "ready-" + rank), "w").close()
if rank == "1":
    while len(os.listdir(sys.argv[1])) < 4:
        time.sleep(0.02)
    {end}
time.sleep(120)
"""


def test_a_rank_killed_by_sigkill_is_named_so_and_every_torn_down_rank_is_listed(tmp_path: Path, script):
    out = tmp_path / "out"
    out.mkdir()
    path = script(KILLED.format(end="os.kill(os.getpid(), signal.SIGKILL)"))
    result = launch("--nnodes", "2", "--nproc-per-node", "2", "--master-port", "0", "--grace-period", "1",
                    str(path), str(out))
    assert result.returncode == 137, result.stderr
    assert "[trainplane node 0] job failed: rank 1 (node 0 at 127.0.0.2, local rank 1) was killed by SIGKILL" \
        in result.stderr
    assert "exited with code 137" not in result.stderr
    assert "[trainplane node 0] generation 1 torn down: rank 0 was killed by SIGTERM" in result.stderr
    assert ("[trainplane node 1] generation 1 torn down: rank 2 was killed by SIGTERM; rank 3 was killed by SIGKILL"
            in result.stderr)
    assert result.stderr.strip().splitlines()[-1] == (
        "[trainplane] exit code 137: rank 1 was killed by SIGKILL (node 0 at 127.0.0.2): 128 + 9, passed through "
        "(not the launcher's)")


def test_sys_exit_137_stays_an_exit_code(tmp_path: Path, script):
    out = tmp_path / "out"
    out.mkdir()
    path = script(KILLED.format(end="sys.exit(137)"))
    result = launch("--nnodes", "2", "--nproc-per-node", "2", "--master-port", "0", "--grace-period", "1",
                    str(path), str(out))
    assert result.returncode == 137, result.stderr
    assert "rank 1 (node 0 at 127.0.0.2, local rank 1) exited with code 137" in result.stderr
    assert "rank 1 was killed" not in result.stderr and "rank 3 was killed by SIGKILL" in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "[trainplane] exit code 137: rank 1's own exit code (node 0 at 127.0.0.2), passed through (not the "
        "launcher's)")
