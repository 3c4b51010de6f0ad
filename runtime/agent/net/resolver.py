"""Host name resolution with overrides and backoff: the agent's DNS seam. Standard library only.

Headless-Service DNS records can appear tens of seconds after a pod starts, so resolution is
retried with capped exponential backoff until a deadline. Overrides (``TRAINPLANE_RESOLVE``) are
consulted first, the way curl's ``--resolve`` is: tests and the local launcher map Service names to
loopback addresses without touching DNS.
"""

from __future__ import annotations

import time
from typing import Callable, Mapping

from runtime.agent.errors import RendezvousError
from runtime.agent.spec.address import first_address


class Resolver:
    """Resolves host names to IPv4/IPv6 address text.

    Args:
        overrides: host name to address, consulted before DNS.
        lookup: the DNS seam, ``host -> address``; raises OSError when the name does not resolve. By
            default ``getaddrinfo``'s first address of either family (A or AAAA records), so an
            IPv6-only Service name resolves too.
        clock: monotonic clock, seconds.
        sleep: sleep function, seconds.
    """

    def __init__(
        self,
        overrides: Mapping[str, str] | None = None,
        lookup: Callable[[str], str] = first_address,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._overrides = dict(overrides or {})
        self._lookup = lookup
        self._clock = clock
        self._sleep = sleep

    def resolve(self, host: str, timeout: float, first_delay: float = 0.1, max_delay: float = 2.0) -> str:
        """Resolve ``host``, retrying with exponential backoff until ``timeout`` seconds pass.

        Raises:
            RendezvousError: the name did not resolve in time; names the host and the last error.
        """
        if host in self._overrides:
            return self._overrides[host]
        deadline = self._clock() + timeout
        delay = first_delay
        while True:
            try:
                return self._lookup(host)
            except OSError as exc:
                if self._clock() + delay > deadline:
                    raise RendezvousError(
                        f"could not resolve {host!r} within {timeout:g} s ({exc}); check that the headless "
                        f"Service exists and the pod's subdomain matches it"
                    ) from exc
            self._sleep(delay)
            delay = min(delay * 2, max_delay)
