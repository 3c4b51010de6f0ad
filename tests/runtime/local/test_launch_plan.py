"""Local launch planning (runtime.local.launch_plan): which addresses and ports the agents and the job get."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Iterator

import pytest

from runtime.local import launch_plan

pytestmark = pytest.mark.unit


class Picks:
    """Stands in for ``random`` in runtime.local.launch_plan: hands out the given ports in order."""

    def __init__(self, *picks: int) -> None:
        self.picks: Iterator[int] = iter(picks)

    def choice(self, _candidates: range) -> int:
        return next(self.picks)


def test_a_picked_base_port_keeps_agent_ports_out_of_the_jobs_reserved_range(monkeypatch: pytest.MonkeyPatch,
                                                                             tmp_path: Path):
    free = launch_plan.free_port("127.0.0.1", size=200)  # a block nothing holds, so only the plan's rule decides
    monkeypatch.setattr(launch_plan, "random", Picks(free + 10, free + 100, free, free + 110))  # agents, then bases
    monkeypatch.setattr(launch_plan, "loopback_range_usable", lambda: False)
    lp = launch_plan.plan(workers=2, master_port=0, num_proc=2, lock_dir=str(tmp_path))  # no other job's locks
    assert lp.addresses == ("127.0.0.1", "127.0.0.1")
    assert lp.ports == (free + 10, free + 100)
    assert lp.master_port == free + 110  # free would reserve free..free+67 (TF_PORT_OFFSET 64 + 4 processes)


def test_picked_ports_lie_outside_the_ephemeral_range_that_outgoing_connections_take(
        monkeypatch: pytest.MonkeyPatch):
    """TensorFlow's gRPC server binds 0.0.0.0:port; a port in the ephemeral range could be any kept-alive
    connection's local port by then ("Could not start gRPC server", seen in CI)."""
    first, last = launch_plan.ephemeral_range()
    size = 70
    for _ in range(50):
        base = launch_plan.free_port("127.0.0.1", size=size)
        assert base >= launch_plan.LISTEN_FLOOR
        assert base + size - 1 < first or base > last, (base, first, last)


def test_a_block_with_a_port_in_use_on_any_address_or_avoided_is_skipped(monkeypatch: pytest.MonkeyPatch):
    """The three blocks lie in one block found free outside the ephemeral range first, so no outgoing
    connection of another process can hold a port of the block expected back (it did once in CI, when the
    busy port came from the OS's port-0 pick)."""
    free = launch_plan.free_port("127.0.0.1", size=300)
    with socket.socket() as busy:
        busy.bind(("127.0.0.2", free + 2))  # another address of this machine: a wildcard bind would still fail
        busy.listen()
        monkeypatch.setattr(launch_plan, "listening_range", lambda _size, _ephemeral: range(1024, 65000))
        monkeypatch.setattr(launch_plan, "random", Picks(free, free + 100, free + 200))
        assert launch_plan.free_port("127.0.0.1", avoid=[free + 103], size=5) == free + 200


def test_the_listening_range_is_the_larger_gap_beside_the_ephemeral_range_or_none():
    assert launch_plan.listening_range(10, (32768, 60999)) == range(launch_plan.LISTEN_FLOOR, 32768 - 10 + 1)
    assert launch_plan.listening_range(10, (12000, 60999)) == range(61000, 65536 - 10 + 1)
    assert launch_plan.listening_range(10, (1024, 65535)) is None


def test_the_ephemeral_range_is_read_from_the_kernel_or_assumed(tmp_path: Path):
    path = tmp_path / "ip_local_port_range"
    path.write_text("20000\t40000\n")
    assert launch_plan.ephemeral_range(str(path)) == (20000, 40000)
    assert launch_plan.ephemeral_range(str(tmp_path / "absent")) == launch_plan.EPHEMERAL_FALLBACK


def test_an_explicit_base_port_that_is_taken_is_refused_naming_the_flag(monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path):
    monkeypatch.setattr(launch_plan, "port_is_free", lambda _host, port: port != 29500)
    with pytest.raises(RuntimeError, match="--master-port: port 29500 is in use"):
        launch_plan.plan(workers=1, master_port=29500, lock_dir=str(tmp_path))
