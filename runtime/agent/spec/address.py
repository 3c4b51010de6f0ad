"""Addresses in both families: joined with a port, split from one, and the family to bind. Standard
library only.

An IPv6 address is bracketed wherever it is followed by a port or put in a URL (RFC 3986 section
3.2.2, RFC 9110's ``Host``): ``[fd00::2]:29532``, ``http://[fd00::2]:32300/info``. Where a consumer
takes a bare address and a port apart (torch's ``MASTER_ADDR`` and ``MASTER_PORT``), it stays bare.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Optional


def is_ipv6(host: str) -> bool:
    """Whether ``host`` is an IPv6 address literal (bare, without brackets)."""
    try:
        return isinstance(ipaddress.ip_address(host), ipaddress.IPv6Address)
    except ValueError:
        return False


def host_port(host: str, port: int) -> str:
    """``host:port``, an IPv6 address in brackets (``[fd00::2]:29532``), as JAX, TensorFlow, Ray,
    Monarch and an HTTP ``Host`` header spell it."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def url(host: str, port: int, path: str = "") -> str:
    """``http://host:port/path`` with an IPv6 address bracketed."""
    return f"http://{host_port(host, port)}{path}"


HOST_PORT_FIX = "use host, host:port, an IPv6 address, or [IPv6 address]:port"
"""How to write what :func:`split_host_port` reads (the agent's coordinator, the launcher's endpoint)."""


def split_host_port(text: str) -> tuple[str, Optional[int]]:
    """``(host, port or None)`` of ``host``, ``host:port``, ``[v6]``, ``[v6]:port`` or a bare IPv6
    address (``fd00::2``: more than one colon and no brackets is an address without a port).

    Raises:
        ValueError: brackets that do not close, text after them that is not ``:port``, a port that
            is not a number, or no host: the problem alone (the caller names the text; the fix is
            :data:`HOST_PORT_FIX`).
    """
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError("has '[' without ']'")
        host, rest = text[1:end], text[end + 1:]
        if rest and not rest.startswith(":"):
            raise ValueError("expected ':port' after ']'")
        port_text = rest[1:] if rest else None
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    else:
        host, port_text = text, None
    if not host:
        raise ValueError("names no host")
    if port_text is None:
        return host, None
    if not port_text.isdigit():
        raise ValueError(f"its port {port_text!r} is not a number")
    return host, int(port_text)


def bind_family(host: str) -> tuple[socket.AddressFamily, str]:
    """``(family, address)`` to bind ``host``: an IPv6 literal in ``AF_INET6``, an IPv4 one in
    ``AF_INET``; ``""`` (every interface) as ``::`` in ``AF_INET6``, dual-stack (the server turns off
    ``IPV6_V6ONLY``), where this host has IPv6, else ``0.0.0.0``; a host name as its first address.

    Raises:
        OSError: a host name does not resolve.
    """
    if not host:
        return (socket.AF_INET6, "::") if _has_ipv6() else (socket.AF_INET, "0.0.0.0")
    if is_ipv6(host):
        return socket.AF_INET6, host
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        return bind_family(first_address(host))
    return socket.AF_INET, host


def _has_ipv6() -> bool:
    """Whether an IPv6 socket can be bound here (a kernel may lack IPv6, or have it disabled)."""
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
            sock.bind(("::", 0))
    except OSError:
        return False
    return True


def first_address(host: str) -> str:
    """``host``'s first address of either family (A or AAAA), in the order ``getaddrinfo`` sorts them
    (RFC 6724); the resolver's DNS lookup.

    Raises:
        OSError: the name does not resolve (``socket.gaierror``).
    """
    return str(socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0])
