"""Remote output: what the ranks write during a call reaches the caller, rank-prefixed, in order per
rank, while the call runs and when it fails (2 nodes x 2 processes, real agents and processes)."""

from __future__ import annotations

import io
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime import RemoteError
from runtime.client import JobClient, OutputChunk
from runtime.workflow import LocalCompute, fn
from runtime.workflow.printer import RankPrinter
from testbed import service_fns

pytestmark = pytest.mark.process


@pytest.fixture(scope="module")
def compute() -> Iterator[LocalCompute]:
    compute = LocalCompute(workers=2, num_proc=2, grace_period=1.0)
    fn(service_fns.rank).to(compute)
    try:
        yield compute
    finally:
        compute.teardown()


def lines_of(text: str, rank: int) -> list[str]:
    """The lines ``[rank N] `` prefixes in ``text``, in order, prefix removed."""
    prefix = f"[rank {rank}] "
    return [line[len(prefix):] for line in text.splitlines() if line.startswith(prefix)]


def test_every_ranks_output_reaches_the_caller_prefixed_and_in_order(compute: LocalCompute, capfd):
    chatter = fn(service_fns.chatter).to(compute)

    assert chatter(3, partial="no newline") == [0, 1, 2, 3]

    out, err = capfd.readouterr()
    for rank in range(4):
        assert lines_of(out, rank) == [*(f"out {i} of rank {rank}" for i in range(3)), f"shell of rank {rank}",
                                       "no newline"]
        assert lines_of(err, rank) == [f"err {i} of rank {rank}" for i in range(3)]


def test_nothing_is_lost_when_the_call_fails(compute: LocalCompute, capfd):
    """The failing rank's output, all of it, is shown before the error is raised (the other ranks
    may be cancelled part way, and show what they wrote until then)."""
    chatter = fn(service_fns.chatter).to(compute)

    with pytest.raises(RemoteError, match="rank 3 fails after writing"):
        chatter(50, fail_rank=3)

    out, err = capfd.readouterr()
    assert lines_of(out, 3)[:50] == [f"out {i} of rank 3" for i in range(50)]
    assert lines_of(err, 3)[:50] == [f"err {i} of rank 3" for i in range(50)]


def test_output_arrives_while_the_call_is_still_running(compute: LocalCompute, tmp_path: Path):
    """Each rank waits for a file that the caller creates only once it has seen every rank's output:
    output that came only with the answer would leave the call waiting out its 30 s."""
    release = tmp_path / "release"
    seen: set[int] = set()
    lock = threading.Lock()

    def on_output(chunk: OutputChunk) -> None:
        with lock:
            if chunk.stream == "stdout" and "out 0" in chunk.text:
                seen.add(chunk.rank)
            if seen == {0, 1, 2, 3}:
                release.touch()

    with JobClient(compute.endpoint.url, compute.endpoint.token) as client:
        results = client.invoke("testbed.service_fns:chatter", [1], {"wait_for": str(release)}, timeout=20,
                                output=on_output)

    assert results == [0, 1, 2, 3] and release.exists()


def test_output_is_off_for_a_job_client_and_with_the_option(compute: LocalCompute, capfd):
    with JobClient(compute.endpoint.url, compute.endpoint.token) as client:
        assert client.call("testbed.service_fns:chatter", 2) == [0, 1, 2, 3]
    assert fn(service_fns.chatter).to(compute).options(output=False)(2) == [0, 1, 2, 3]

    out, err = capfd.readouterr()
    assert not re.search(r"^\[rank \d\] ", out + err, re.MULTILINE)


def test_redraws_keep_their_ranks_prefix_and_two_ranks_bars_never_share_a_line(compute: LocalCompute, capfd):
    assert fn(service_fns.redraw).to(compute)(15) == [0, 1, 2, 3]

    _, err = capfd.readouterr()
    bars = [line for line in err.split("\n") if "bar of rank" in line]
    for line in bars:
        draws = line.split("\r")
        ranks = {draw.split("]")[0] for draw in draws if draw}
        assert len(ranks) == 1 and all(d.startswith("[rank ") for d in draws if d), repr(line)
        (rank,) = ranks
        assert all(f"bar of rank {rank[6:]}: " in d for d in draws if d), repr(line)
    for rank in range(4):
        assert f"[rank {rank}] bar of rank {rank}: 15/15" in err


def test_the_printer_ends_an_open_line_before_another_rank_or_stream_writes():
    out, err = io.StringIO(), io.StringIO()
    printer = RankPrinter(out, err)
    for rank, stream, text in [(0, "stderr", "\r 10%"), (1, "stderr", "\r 50%"), (0, "stderr", "\r 20%"),
                               (0, "stdout", "saved"), (0, "stderr", "\n"), (1, "stderr", "\r 60%\n"),
                               (0, "stdout", " epoch 1\n")]:
        printer(OutputChunk(rank, stream, text))
    assert err.getvalue() == "\r[rank 0]  10%\n\r[rank 1]  50%\n\r[rank 0]  20%\n\r[rank 1]  60%\n"
    assert out.getvalue() == "[rank 0] saved\n[rank 0]  epoch 1\n"
