"""The bridged hosts of tests.netns pick a subnet no route of this namespace holds, so a bridge that a
killed run left behind (or a concurrent run holds) does not swallow this run's packets: every test of
test_fencing_live once failed that way, its agents reaching each other and the test reaching none."""

from __future__ import annotations

import ipaddress
import socket
import subprocess
import sys

import pytest

from tests import netns

pytestmark = pytest.mark.process


def test_free_subnet_skips_every_candidate_a_route_overlaps(monkeypatch: pytest.MonkeyPatch) -> None:
    taken = [ipaddress.ip_network(f"10.{x}.0.0/16") for x in range(64, 128) if x != 99]
    monkeypatch.setattr(netns, "_routes", lambda: [*taken, ipaddress.ip_network("192.0.2.0/24")])
    assert netns.free_subnet() == ipaddress.ip_network("10.99.0.0/16")
    monkeypatch.setattr(netns, "_routes", lambda: [ipaddress.ip_network("10.0.0.0/8")])
    with pytest.raises(RuntimeError, match="no free"):
        netns.free_subnet()


def test_a_second_bridge_beside_a_left_over_one_reaches_its_hosts() -> None:
    with netns.bridged(1) as stale, netns.bridged(1) as fresh:
        assert ipaddress.ip_address(stale[0][1]) not in ipaddress.ip_network(f"{fresh[0][1]}/16", strict=False)
        server = subprocess.Popen(
            ["ip", "netns", "exec", fresh[0][0], sys.executable, "-c",
             "import socket; s = socket.create_server(('0.0.0.0', 32431)); print('up', flush=True); "
             "c, _ = s.accept(); c.sendall(b'hello'); c.close()"],
            stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None and server.stdout.readline().strip() == "up"
            with socket.create_connection((fresh[0][1], 32431), timeout=10) as conn:
                assert conn.recv(5) == b"hello"
        finally:
            server.kill()
            server.wait()
