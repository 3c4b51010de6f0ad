"""Local launch planning (runtime.ports): which addresses and ports the agents and the job get."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from runtime import ports

pytestmark = pytest.mark.unit


def test_a_picked_base_port_keeps_agent_ports_out_of_the_jobs_reserved_range(monkeypatch: pytest.MonkeyPatch,
                                                                             tmp_path: Path):
    picks: Iterator[int] = iter([40010, 40100, 40000, 41000])  # agent ports, then base port candidates
    monkeypatch.setattr(ports, "loopback_range_usable", lambda: False)
    monkeypatch.setattr(ports, "free_port", lambda _host, _avoid=(): next(picks))
    lp = ports.plan(workers=2, master_port=0, num_proc=2, lock_dir=str(tmp_path))  # no other job's locks
    assert lp.addresses == ("127.0.0.1", "127.0.0.1")
    assert lp.ports == (40010, 40100)
    assert lp.master_port == 41000  # 40000 would reserve 40000..40067 (TF_PORT_OFFSET 64 + 4 processes)


def test_an_explicit_base_port_that_is_taken_is_refused_naming_the_flag(monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path):
    monkeypatch.setattr(ports, "port_is_free", lambda _host, port: port != 29500)
    with pytest.raises(RuntimeError, match="--master-port: port 29500 is in use"):
        ports.plan(workers=1, master_port=29500, lock_dir=str(tmp_path))
