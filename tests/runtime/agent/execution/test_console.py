"""The console the ranks' output shares: ``\\r`` redraws keep their prefix, and an unfinished line of
one writer is ended before another writer's text (in one process, and across processes through the
shared state file, as a local job's agents share the launcher's terminal)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.agent.execution.console import Console
from runtime.agent.spec.console_lines import AFTER_CR, MID, START, render
from tests.conftest import ROOT

pytestmark = pytest.mark.process

P = b"[rank 3] "


@pytest.mark.parametrize(("data", "state", "shown", "after"), [
    (b"loss 1\nloss 2\n", START, b"[rank 3] loss 1\n[rank 3] loss 2\n", START),
    (b"\n", START, b"[rank 3] \n", START),  # an empty line keeps its prefix, as before
    (b"\r 10%|#", START, b"\r[rank 3]  10%|#", MID),  # tqdm's first draw
    (b"\r 20%|##", MID, b"\r[rank 3]  20%|##", MID),  # a redraw: the prefix again after the \r
    (b"50%\r", MID, b"50%\r", AFTER_CR),  # a \r last: the prefix waits for what follows
    (b"\n", AFTER_CR, b"\n", START),  # \r\n split over two writes: no prefix inside it
    (b"60%", AFTER_CR, b"[rank 3] 60%", MID),
    (b"done\r\n", START, b"[rank 3] done\r\n", START),
    (b"(Pdb) ", START, b"[rank 3] (Pdb) ", MID),
    (b"more", MID, b"more", MID),
])
def test_render_puts_the_prefix_before_every_line_and_every_redraw(data: bytes, state: int, shown: bytes, after: int):
    assert render(data, P, state) == (shown, after)


def test_one_writers_open_line_is_ended_before_another_writes_and_continues_on_its_own():
    out, err = io.BytesIO(), io.BytesIO()
    console = Console(out, err)
    a, b = console.writer(), console.writer()
    console.write(a, 0, b"[rank 0] ", b"\r 10%")
    console.write(b, 0, b"[rank 1] ", b"\r 30%")
    console.write(a, 0, b"[rank 0] ", b"\r 20%")
    console.write(a, 0, b"[rank 0] ", b"\n")  # the end of a line the other writer already ended
    console.write(b, 0, b"[rank 1] ", b" done\n")
    assert out.getvalue() == b"\r[rank 0]  10%\n\r[rank 1]  30%\n\r[rank 0]  20%\n[rank 1]  done\n"


def test_an_open_line_on_stdout_is_ended_before_stderr_is_written_and_at_the_writers_end():
    out, err = io.BytesIO(), io.BytesIO()
    console = Console(out, err)
    a, b = console.writer(), console.writer()
    console.write(a, 0, b"[rank 0] ", b"epoch 1 ")
    console.write(b, 1, b"[trainplane node 0] ", b"note\n")
    console.write(a, 1, b"[rank 0] ", b"partial")
    console.end(a, 1)
    console.end(a, 0)  # not open any more: nothing written
    assert out.getvalue() == b"[rank 0] epoch 1 \n"
    assert err.getvalue() == b"[trainplane node 0] note\n[rank 0] partial\n"


WRITER = """
import os, sys
from runtime.agent.execution.console import Console
sink = os.fdopen(int(sys.argv[2]), "wb", buffering=0)
console = Console(sink, sink)
console.share(sys.argv[1])
me = console.writer()
for line in sys.stdin:
    prefix, _, data = line.rstrip("\\n").partition("|")
    console.write(me, 0, f"[{prefix}] ".encode(), data.encode().decode("unicode_escape").encode())
    print("ok", flush=True)
"""


def test_processes_sharing_the_state_file_end_each_others_open_lines(tmp_path: Path):
    """Two real processes write one file (as two agents write the launcher's terminal), in turns
    this test orders: each ends the other's open line, and continues its own on a line of its own."""
    shown = tmp_path / "console.txt"
    fd = os.open(shown, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path / "state"), str(fd)], pass_fds=(fd,),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    try:
        for who, data in [(0, "rank 0|\\r 10%"), (1, "rank 1|\\r 40%"), (0, "rank 0|\\r 20%"), (0, "rank 0|\\n"),
                          (1, "rank 1| done\\n")]:
            procs[who].stdin.write(data + "\n")  # type: ignore[union-attr]
            procs[who].stdin.flush()  # type: ignore[union-attr]
            assert procs[who].stdout.readline() == "ok\n"  # type: ignore[union-attr]
    finally:
        for proc in procs:
            proc.stdin.close()  # type: ignore[union-attr]
            proc.wait(timeout=30)
        os.close(fd)
    assert shown.read_bytes() == b"\r[rank 0]  10%\n\r[rank 1]  40%\n\r[rank 0]  20%\n[rank 1]  done\n"
