"""Network namespaces as separate hosts: two joined by a veth pair on IPv6 only (fd00::2 and fd00::3)
or IPv4 only (10.213.0.2 and 10.213.0.3), or any number on one bridge (IPv4), whose links a test takes
down and up."""

from __future__ import annotations

import contextlib
import ipaddress
import random
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Iterator, Mapping

ADDRESSES = ("fd00::2", "fd00::3")
"""The two hosts' addresses, in namespace order."""
IPV4_ADDRESSES = ("10.213.0.2", "10.213.0.3")
"""The two hosts' addresses in :func:`ipv4_pair`, in namespace order."""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@contextlib.contextmanager
def ipv6_pair(hosts: Mapping[str, str]) -> Iterator[list[tuple[str, str]]]:
    """Two fresh namespaces (names prefixed h12) joined by a veth pair, ``fd00::2/64`` and
    ``fd00::3/64``, loopback up, no IPv4 between them; in both, ``hosts`` (name to address) resolve
    through /etc/hosts, which ``ip netns exec`` mounts from /etc/netns/NAME/hosts: an AAAA record
    and no A record, as an IPv6-only cluster's DNS answers. Yields ``(namespace, link)`` per host;
    run a process on host ``i`` with ``ip netns exec <namespace>``."""
    with _pair(ADDRESSES, 64, hosts) as pair:
        yield pair


@contextlib.contextmanager
def ipv4_pair(hosts: Mapping[str, str] | None = None) -> Iterator[list[tuple[str, str]]]:
    """As :func:`ipv6_pair`, on IPv4 only: ``10.213.0.2/24`` and ``10.213.0.3/24``."""
    with _pair(IPV4_ADDRESSES, 24, hosts or {}) as pair:
        yield pair


@contextlib.contextmanager
def _pair(addresses: tuple[str, str], prefix: int, hosts: Mapping[str, str]) -> Iterator[list[tuple[str, str]]]:
    tag = uuid.uuid4().hex[:6]
    names = (f"h12v{tag}a", f"h12v{tag}b")
    links = (f"h12{tag}a", f"h12{tag}b")
    lines = "".join(f"{addr} {name}\n" for name, addr in hosts.items())
    try:
        for name in names:
            (Path("/etc/netns") / name).mkdir(parents=True)
            (Path("/etc/netns") / name / "hosts").write_text(f"127.0.0.1 localhost\n::1 localhost\n{lines}")
            _ip("netns", "add", name)
        _ip("link", "add", links[0], "netns", names[0], "type", "veth", "peer", "name", links[1], "netns", names[1])
        for name, link, addr in zip(names, links, addresses):
            _ip("-n", name, "addr", "add", f"{addr}/{prefix}", "dev", link, *(("nodad",) if ":" in addr else ()))
            _ip("-n", name, "link", "set", "lo", "up")
            _ip("-n", name, "link", "set", link, "up")
        yield list(zip(names, links))
    finally:
        for name in names:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
            shutil.rmtree(Path("/etc/netns") / name, ignore_errors=True)


def _routes() -> list[ipaddress.IPv4Network]:
    out = subprocess.run(["ip", "-4", "route", "show"], check=True, capture_output=True, text=True, timeout=30).stdout
    nets = []
    for line in out.splitlines():
        dest = line.split()[0] if line.split() else "default"
        if dest != "default":
            nets.append(ipaddress.ip_network(dest, strict=False))
    return nets


def free_subnet() -> ipaddress.IPv4Network:
    """A ``10.X.0.0/16`` (X in 64..127, in random order) that no IPv4 route of this namespace overlaps:
    a bridge another run left behind, or one a concurrent run holds, keeps its route, and a second
    bridge on the same subnet would lose every packet this namespace sends to the first.

    Raises ``RuntimeError`` when every candidate is taken."""
    routes = _routes()
    candidates = [ipaddress.ip_network(f"10.{x}.0.0/16") for x in range(64, 128)]
    random.shuffle(candidates)
    for subnet in candidates:
        if not any(subnet.overlaps(route) for route in routes):
            return subnet
    raise RuntimeError("no free 10.64-127.0.0/16 subnet for a bridge; remove stale h20b* bridges (ip link del)")


def _bridge_address(subnet: ipaddress.IPv4Network, index: int) -> str:
    return str(subnet.network_address + (index // 250) * 256 + index % 250 + 1)


@contextlib.contextmanager
def bridged(hosts: int) -> Iterator[list[tuple[str, str, str]]]:
    """``hosts`` fresh namespaces (names prefixed h20), each joined to one bridge in this namespace by
    a veth pair, on an IPv4 /16 no route here overlaps (:func:`free_subnet`; host ``i`` at
    ``10.X.0.<i + 1>``, this namespace at ``10.X.255.254``, so a test reaches every host). Yields
    ``(namespace, address, link)`` per host: ``link`` is the pair's end on this side, which :func:`cut`
    takes down to cut the host off and :func:`heal` brings back. Run a process on host ``i`` with
    ``ip netns exec <namespace>``."""
    tag = uuid.uuid4().hex[:6]
    bridge = f"h20b{tag}"
    names = [f"h20n{tag}{i}" for i in range(hosts)]
    links = [f"h20l{tag}{i}" for i in range(hosts)]
    subnet = free_subnet()
    gateway = subnet.network_address + 255 * 256 + 254
    try:
        _ip("link", "add", bridge, "type", "bridge")
        _ip("addr", "add", f"{gateway}/{subnet.prefixlen}", "dev", bridge)
        _ip("link", "set", bridge, "up")
        for index, (name, link) in enumerate(zip(names, links)):
            _ip("netns", "add", name)
            _ip("link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", name)
            _ip("link", "set", link, "master", bridge)
            _ip("link", "set", link, "up")
            _ip("-n", name, "addr", "add", f"{_bridge_address(subnet, index)}/{subnet.prefixlen}", "dev", "eth0")
            _ip("-n", name, "link", "set", "lo", "up")
            _ip("-n", name, "link", "set", "eth0", "up")
        yield [(name, _bridge_address(subnet, i), link) for i, (name, link) in enumerate(zip(names, links))]
    finally:
        for name in names:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
        for link in links:
            subprocess.run(["ip", "link", "del", link], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True, timeout=30)


def cut(link: str) -> None:
    """Take a host's link down (:func:`bridged`): it reaches nobody and nobody reaches it."""
    _ip("link", "set", link, "down")


def heal(link: str) -> None:
    """Bring a host's link back up."""
    _ip("link", "set", link, "up")
